//go:build !linux

package dns

// Elsewhere than Linux, each query is read and answered on its own, and
// ListenUDP opens one socket.

func newBatchReader(*udpReader) *batchReader { return nil }

type batchReader struct{ *udpReader }

const soReusePort = 0

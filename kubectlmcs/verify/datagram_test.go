package verify

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// lockedBuffer is what a probe's log is: written by the probe, read by the
// test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestTheProbeLogsTheDatagramsACheckSends(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var log lockedBuffer
	served := make(chan error, 1)
	go func() { served <- ServeDatagrams(ctx, conn, &log) }()

	sendCtx, stop := context.WithCancel(ctx)
	go SendDatagrams(sendCtx, []string{conn.LocalAddr().String()}, "check-pod-a", 20*time.Millisecond)
	var got []Datagram
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		got, err = ParseDatagrams(strings.NewReader("a line of another kind\n" + log.String()))
		return err == nil && len(got) >= 2, nil
	})
	stop()
	if err != nil {
		t.Fatalf("datagrams logged: %+v (%v)\n%s", got, err, log.String())
	}
	for _, d := range got {
		if d.Payload != "check-pod-a" || !strings.HasPrefix(d.From, "127.0.0.1:") {
			t.Errorf("logged %+v, want check-pod-a from 127.0.0.1", d)
		}
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("the probe ended with %v, want nil once its context ends", err)
	}
}

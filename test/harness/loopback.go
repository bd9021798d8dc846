package harness

import (
	"io"
	"net"
)

// ForwardLoopback listens on address (a loopback address and port of the
// harness process, such as an API server's) inside the node's namespace,
// where loopback is the node's own, and copies every connection to the
// same address outside it. A program that runs inside the node with a
// kubeconfig naming 127.0.0.1 reaches its API server this way. The
// returned function stops listening.
func (n *Node) ForwardLoopback(address string) (func(), error) {
	l, err := n.NS.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", address)
				if err != nil {
					return
				}
				defer out.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return func() { _ = l.Close() }, nil
}

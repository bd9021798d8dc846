package readiness

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// How join asks a pod of the cluster DNS, and why this way. The question
// must reach each pod itself: the Service's address would answer from
// whichever pod it picks, and each pod reloads its Corefile in its own
// time. But join runs on the operator's machine, which may reach the API
// server and nothing else of the cluster (no route to pod IPs). So it asks
// through the API server, as kubectl port-forward does: the pods'
// portforward subresource carries a TCP stream to port 53 inside the pod's
// network namespace, and the question goes over DNS's TCP transport, which
// the same server block answers as UDP. The alternatives fall short: the
// API server's pod proxy carries HTTP only; exec needs a DNS client in the
// CoreDNS image, which has no shell; a pod of mcsd's image asking from
// inside the cluster would need a subcommand that mcsd images older than
// this kubectl-mcs lack, and costs a pod's scheduling and start on every
// check. Port-forward needs only what kubectl port-forward needs: the
// right to create pods/portforward, and an API server that reaches the
// kubelets (as it must for logs and exec).

// dnsPort is where a cluster DNS pod answers.
const dnsPort = 53

// errUnreachable marks a pod that could not be asked at all: the API
// server refused or failed the port-forward. Waiting, or restarting the
// pod, will not change that.
var errUnreachable = errors.New("could not ask the pod through the API server (port-forward)")

// askPod sends query to port 53 of pod over TCP through the API server's
// port-forward, and returns the answer.
func askPod(ctx context.Context, cfg *rest.Config, kube kubernetes.Interface, pod *corev1.Pod, query *dns.Msg) (*dns.Msg, error) {
	conn, err := dialPortForward(cfg, kube, pod)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUnreachable, err)
	}
	defer conn.Close()
	// Streams have no deadlines: closing the connection ends a question
	// that outlives ctx.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	headers := http.Header{}
	headers.Set(corev1.StreamType, corev1.StreamTypeError)
	headers.Set(corev1.PortHeader, strconv.Itoa(dnsPort))
	headers.Set(corev1.PortForwardRequestIDHeader, "0")
	errStream, err := conn.CreateStream(headers)
	if err != nil {
		return nil, fmt.Errorf("%w: error stream: %v", errUnreachable, err)
	}
	// Nothing is written to it; the kubelet says there why it could not
	// connect to the port.
	errStream.Close()
	forwardErr := make(chan error, 1)
	go func() {
		msg, err := io.ReadAll(errStream)
		if len(msg) > 0 {
			err = errors.New(string(msg))
		}
		forwardErr <- err
	}()
	headers.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(headers)
	if err != nil {
		return nil, fmt.Errorf("%w: data stream: %v", errUnreachable, err)
	}
	answer, err := exchangeTCP(data, query)
	if err != nil {
		// The kubelet's reason, when it gave one, says more than the
		// closed stream.
		select {
		case ferr := <-forwardErr:
			if ferr != nil {
				return nil, ferr
			}
		default:
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return answer, nil
}

// dialPortForward opens a port-forward connection to pod as kubectl
// port-forward does: over WebSocket, falling back to SPDY where the API
// server does not upgrade to it.
func dialPortForward(cfg *rest.Config, kube kubernetes.Interface, pod *corev1.Pod) (httpstream.Connection, error) {
	url := kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, err
	}
	var dialer httpstream.Dialer = spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	if ws, err := portforward.NewSPDYOverWebsocketDialer(url, cfg); err == nil {
		dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
	conn, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
	return conn, err
}

// exchangeTCP writes query on stream framed as DNS over TCP (RFC 1035
// 4.2.2: a two-byte length, then the message) and reads the answer.
func exchangeTCP(stream io.ReadWriter, query *dns.Msg) (*dns.Msg, error) {
	packed, err := query.Pack()
	if err != nil {
		return nil, err
	}
	framed := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(packed)), uint16(len(packed)))
	if _, err := stream.Write(append(framed, packed...)); err != nil {
		return nil, fmt.Errorf("sending the question: %w", err)
	}
	var size [2]byte
	if _, err := io.ReadFull(stream, size[:]); err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	buf := make([]byte, binary.BigEndian.Uint16(size[:]))
	if _, err := io.ReadFull(stream, buf); err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	answer := new(dns.Msg)
	if err := answer.Unpack(buf); err != nil {
		return nil, fmt.Errorf("an answer that is not DNS: %w", err)
	}
	return answer, nil
}

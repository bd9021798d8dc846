package verify

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// serveProbe runs the probe of east on loopback until the test ends and
// returns its port.
func serveProbe(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = Serve(ctx, ln, "east probe") }()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestCheckReachesTheProbeOfTheRightCluster(t *testing.T) {
	ctx := context.Background()
	target := "localhost:" + strconv.Itoa(serveProbe(t))

	// A port nothing listens on.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nowhere := "localhost:" + strconv.Itoa(closed.Addr().(*net.TCPAddr).Port)
	closed.Close()

	checkCtx, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	results := Check(checkCtx, []string{target, nowhere}, map[string]string{target: "east", nowhere: "west"}, 100*time.Millisecond)
	if r := results[0]; !r.OK() || r.Reply != "east probe" || r.Attempts != 1 || r.Address == "" {
		t.Errorf("the probe of east: %+v", r)
	}
	if r := results[1]; r.OK() || !strings.HasPrefix(r.Error, "connect:") || r.Attempts < 2 {
		t.Errorf("a closed port: %+v, want connect errors, tried again", r)
	}

}

func TestCheckTellsAProbeOfAnotherCluster(t *testing.T) {
	target := "127.0.0.1:" + strconv.Itoa(serveProbe(t))
	checkCtx, stop := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer stop()
	r := Check(checkCtx, []string{target}, map[string]string{target: "west"}, 50*time.Millisecond)[0]
	if r.OK() || !strings.Contains(r.Error, `reached "east probe", not the probe of west`) {
		t.Fatalf("%+v", r)
	}
}

func TestParseResultsSkipsOtherLines(t *testing.T) {
	got, err := ParseResults(strings.NewReader("starting\n{\"target\":\"a:1\",\"reply\":\"east p\",\"attempts\":2}\n{\"target\":\"b:1\",\"error\":\"resolve: no such host\"}\n"))
	if err != nil || len(got) != 2 || !got["a:1"].OK() || got["b:1"].OK() || got["a:1"].Attempts != 2 {
		t.Fatalf("%+v %v", got, err)
	}
}

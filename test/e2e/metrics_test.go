package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/mcsd-io/mcsd/test/lib/fixture"
)

// metricValue returns the sum of the daemon's /metrics samples of name
// whose labels contain labels (0 when there is none), and the last such
// line.
func metricValue(ctx context.Context, d *fixture.Daemon, name, labels string) (float64, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.Metrics, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	var sum float64
	var last string
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, labels) {
			continue
		}
		last = line
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, line, fmt.Errorf("%s: %q: %w", d.Metrics, line, err)
		}
		sum += v
	}
	return sum, last, nil
}

// metricReaches waits until the daemon's /metrics has samples of name
// whose labels contain labels and whose sum is at least min.
func metricReaches(ctx context.Context, d *fixture.Daemon, name, labels string, min float64) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		v, line, err := metricValue(ctx, d, name, labels)
		if line != "" {
			last = line
		}
		return err == nil && v >= min, nil
	})
	if err != nil {
		return fmt.Errorf("%s{%s} did not reach %v on %s (last: %q)", name, labels, min, d.Member.ID, last)
	}
	return nil
}

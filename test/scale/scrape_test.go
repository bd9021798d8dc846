package scale

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/wait"
)

// sample is one scrape of a daemon's metrics: the value of every series,
// keyed `name{label="value",...}` with labels in name order.
type sample map[string]float64

// scraper reads a daemon's /metrics.
type scraper struct{ url string }

func (s *scraper) scrape(ctx context.Context) (sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := parseSample(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", s.url, err)
	}
	return out, nil
}

// parseSample reads metrics in the text format.
func parseSample(r io.Reader) (sample, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := sample{}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				out[seriesKey(name+"_sum", m)] = h.GetSampleSum()
				out[seriesKey(name+"_count", m)] = float64(h.GetSampleCount())
				continue
			}
			out[seriesKey(name, m)] = value(m)
		}
	}
	return out, nil
}

func seriesKey(name string, m *dto.Metric) string {
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if len(labels) == 0 {
		return name
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+`="`+labels[k]+`"`)
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

// sum adds up the series of a metric whose labels include those given; a
// name with labels ("name{...}") is one series exactly.
func (s sample) sum(name string, labels map[string]string) float64 {
	if strings.Contains(name, "{") {
		return s[name]
	}
	total := 0.0
	for key, v := range s {
		metric, rest, _ := strings.Cut(key, "{")
		if metric != name {
			continue
		}
		ok := true
		for k, want := range labels {
			if !strings.Contains(rest, k+`="`+want+`"`) {
				ok = false
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

// atLeast says whether every series of want has reached its value.
func (s sample) atLeast(want map[string]float64) bool {
	for k, v := range want {
		if s[k] < v {
			return false
		}
	}
	return true
}

// waitFor scrapes every interval until ok, or ctx ends.
func (s *scraper) waitFor(ctx context.Context, interval time.Duration, ok func(sample) bool) error {
	return wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		got, err := s.scrape(ctx)
		return err == nil && ok(got), nil
	})
}

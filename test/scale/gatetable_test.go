package scale

import (
	"fmt"
	"io"
	"testing"
	"text/tabwriter"
	"time"
)

// allReportsEvents is what the batch's report writes would have cost in
// watch events had every node watched every report (the design the
// summary replaced): each write sent to each of the nodes.
func (r gateResult) allReportsEvents() float64 { return r.reportWrites * float64(r.nodes) }

// gateEvents is what the gate's design should cost in watch events: each
// report write sent to the aggregator, each summary write to every node.
func (r gateResult) gateEvents() float64 {
	return r.reportWrites + r.summaryWrites*float64(r.nodes)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// reportGate adds a run's figures to the benchmark's output.
func reportGate(b *testing.B, r gateResult) {
	b.ReportMetric(r.reportWrites, "report-writes")
	b.ReportMetric(r.summaryWrites, "summary-writes")
	b.ReportMetric(r.leaseEvents, "lease-events")
	b.ReportMetric(r.gateEvents(), "lease-events-expected")
	b.ReportMetric(r.allReportsEvents(), "lease-events-all-reports")
	b.ReportMetric(r.churnReportWrites, "churn-report-writes")
	b.ReportMetric(r.apiserverCPU.Seconds(), "apiserver-cpu-s")
	b.ReportMetric(ms(percentile(r.released, 50)), "release-p50-ms")
	b.ReportMetric(ms(percentile(r.released, 99)), "release-p99-ms")
	b.Logf("%d nodes: writes %.0f, Lease events %.0f (expected %.0f; every node watching every report: ~%.0f), API server CPU %.2f s, load %s -> %s",
		r.nodes, r.reportWrites+r.summaryWrites, r.leaseEvents, r.gateEvents(), r.allReportsEvents(), r.apiserverCPU.Seconds(), r.loadBefore, r.loadAfter)
}

func printGateTable(w io.Writer, rows []gateResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "nodes\tClusterSetIPs\treport writes\tsummary writes\tall Lease writes\tLease events\texpected\tall-reports events (est.)\tServiceImport events\twatches dropped\tapiserver CPU\tetcd CPU\taggregator CPU\tnodes CPU\trelease p50\trelease p99\tfirst node p50\tnodes RSS\tthen a write of each ServiceImport + 1 ClusterSetIP: report, summary writes\tload before\tload after\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.2f s\t%.2f s\t%.2f s\t%.2f s\t%.0f ms\t%.0f ms\t%.0f ms\t%s\t%.0f, %.0f\t%s\t%s\t\n",
			r.nodes, r.batch, r.reportWrites, r.summaryWrites, r.leaseWrites, r.leaseEvents, r.gateEvents(), r.allReportsEvents(), r.importEvents, r.droppedWatches,
			r.apiserverCPU.Seconds(), r.etcdCPU.Seconds(), r.aggregatorCPU.Seconds(), r.nodesCPU.Seconds(),
			ms(percentile(r.released, 50)), ms(percentile(r.released, 99)), ms(percentile(r.firstReleased, 50)),
			mib(r.nodesRSS), r.churnReportWrites, r.churnSummaryWrites, r.loadBefore, r.loadAfter)
	}
	_ = tw.Flush()
}

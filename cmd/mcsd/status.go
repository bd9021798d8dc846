package main

import (
	"encoding/json"
	"net/http"
	"sync/atomic"

	"github.com/mcsd-io/mcsd/internal/version"
)

// status is what /statusz answers, in the spirit of kube-proxy's /configz
// and /proxyMode: what this process runs with, as decided at run time
// (the mode --proxier-mode=auto picked, the ranges the broker gave), which
// the flags alone do not say.
type status struct {
	Version    string   `json:"version"`
	Revision   string   `json:"revision"`
	GoVersion  string   `json:"goVersion"`
	ClusterID  string   `json:"clusterID"`
	Components []string `json:"components"`
	IPFamilies []string `json:"ipFamilies"`
	// ClusterSetCIDRs are the ranges DNS and the proxier run with.
	ClusterSetCIDRs []string `json:"clusterSetCIDRs"`
	// ProxierMode is nftables or iptables; empty without the proxier.
	ProxierMode string `json:"proxierMode,omitempty"`
	// DNSGate is --dns-gate (node or cluster) with the proxier, none
	// with DNS alone (nothing holds it back), empty with neither.
	DNSGate        string          `json:"dnsGate,omitempty"`
	LeaderElection *leaderElection `json:"leaderElection,omitempty"`
}

// leaderElection is the controllers' side of /statusz.
type leaderElection struct {
	// Enabled is false with --leader-elect=false: this replica always
	// leads.
	Enabled bool   `json:"enabled"`
	Lease   string `json:"lease,omitempty"`
	// Identity is this replica's; Leader the holder's last seen, empty
	// until one is.
	Identity string `json:"identity,omitempty"`
	Leader   string `json:"leader,omitempty"`
	Leading  bool   `json:"leading"`
	// BrokerRanges are the clusterset ranges of the broker's settings the
	// leading replica's controllers run with.
	BrokerRanges string `json:"brokerRanges,omitempty"`
}

// election is what the leader election tells /statusz; the zero value
// is a replica that has not run an election yet.
type election struct {
	identity     atomic.Pointer[string]
	leader       atomic.Pointer[string]
	brokerRanges atomic.Pointer[string]
}

func loadString(p *atomic.Pointer[string]) string {
	if s := p.Load(); s != nil {
		return *s
	}
	return ""
}

// statusHandlers are /statusz (JSON) and /proxyMode (kube-proxy's: the
// mode's name alone, for scripts), over what this process runs.
func statusHandlers(mux *http.ServeMux, o *options, clusterID string, dp *nodeAgent, ctrl *controllers) {
	build := version.Get()
	var proxierMode string
	if dp != nil {
		proxierMode = dp.proxierMode()
	}
	mux.HandleFunc("/statusz", func(w http.ResponseWriter, _ *http.Request) {
		s := status{
			Version: build.Version, Revision: build.Revision, GoVersion: build.GoVersion,
			ClusterID: clusterID, Components: o.components, ProxierMode: proxierMode,
		}
		for _, f := range o.ipFamilies {
			s.IPFamilies = append(s.IPFamilies, string(f))
		}
		for _, p := range o.clusterSetCIDRs {
			s.ClusterSetCIDRs = append(s.ClusterSetCIDRs, p.String())
		}
		switch {
		case dp == nil:
		case dp.provider != nil:
			s.DNSGate = o.dnsGate
		case dp.dnsServer != nil:
			s.DNSGate = "none"
		}
		if ctrl != nil {
			s.LeaderElection = &leaderElection{
				Enabled:      o.leaderElect,
				Identity:     loadString(&ctrl.election.identity),
				Leader:       loadString(&ctrl.election.leader),
				Leading:      ctrl.leading.Load(),
				BrokerRanges: loadString(&ctrl.election.brokerRanges),
			}
			if o.leaderElect {
				s.LeaderElection.Lease = o.leaderElectNS + "/" + leaseName
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s)
	})
	if mode := proxierMode; mode != "" {
		mux.HandleFunc("/proxyMode", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			_, _ = w.Write([]byte(mode))
		})
	}
}

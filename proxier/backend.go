package proxier

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// A mode is a backend behind the shared core. The core (sync.go) tracks
// changes, chooses each port's endpoints, decides which services a sync
// renders, commits what the kernel took and reports carried ClusterSetIPs;
// a backend turns one service into its mode's rules and writes a sync's
// renders to the kernel in one transaction (one iptables-restore per
// table). Each backend owns its kernel interface and whatever it must
// remember of what it wrote beyond the shared part of renderedService.

// syncKind is how much a sync does, least first.
type syncKind int

const (
	// partialSync writes the services that changed.
	partialSync syncKind = iota
	// fullSync, every FullSyncPeriod, also repairs what was changed behind
	// the proxier's back: nftables counts the rules of its chains and
	// rewrites those that differ, iptables writes every chain again.
	fullSync
	// rewriteSync starts over: the first sync, one after a failure, or one
	// after the rules were found gone. Everything is written, leftovers of
	// an earlier run are deleted.
	rewriteSync
)

// backend is one mode's side of the proxier. The core calls it with the
// proxier's mutex held, from the sync loop only.
type backend interface {
	// mode is the backend's Mode.
	mode() Mode
	// plan is told the kind of sync due and whether the periodic check of
	// the rules is due; it returns the kind to run (a larger one when the
	// check found the rules changed behind the proxier's back) and whether
	// it looked at the kernel.
	plan(kind syncKind, checkDue bool) (run syncKind, checked bool)
	// kindName is how logs call a sync of kind.
	kindName(kind syncKind) string
	// rendersAll says whether a sync of kind renders every service, not
	// only those that changed.
	rendersAll(kind syncKind) bool
	// tidy runs before every sync that is not a rewrite, whether or not
	// it writes anything (nftables deletes the chains it flushed a moment
	// ago); an error makes the next sync a rewrite.
	tidy(now time.Time) error
	// render computes a service's rules from its slices; prev is what was
	// committed for it (nil: nothing).
	render(svc *serviceInfo, slices []*sliceInfo, pol trafficPolicy, prev *renderedService) *renderedService
	// write brings the kernel's rules from committed to renders of names
	// (every service of committed and renders on a sync that renders all)
	// in one transaction. On success the backend keeps what it must of
	// it; on failure it forgets what the transaction may have changed,
	// counts and logs the failure, and the next sync is a rewrite.
	write(s *syncWrite) error
	// dropped counts the committed ports whose traffic is dropped for want
	// of local endpoints.
	dropped(committed map[types.NamespacedName]*renderedService) int
	// describe adds to the log line of a successful sync what the backend
	// holds.
	describe(committed map[types.NamespacedName]*renderedService) []any
}

// syncWrite is what one sync asks a backend to write.
type syncWrite struct {
	kind      syncKind
	names     []types.NamespacedName
	renders   map[types.NamespacedName]*renderedService
	committed map[types.NamespacedName]*renderedService
	start     time.Time
}

// after is a service's rules once the sync is committed.
func (s *syncWrite) after(name types.NamespacedName) *renderedService {
	if r, ok := s.renders[name]; ok {
		return r
	}
	return s.committed[name]
}

package version

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// SupportedMinorSkew is how many minor versions the mcsd of two members of
// one clusterset may be apart, in the same major version: what an upgrade
// member by member goes through (README, "Upgrades"). The broker records
// of version N are read by N-1 and N+1.
const SupportedMinorSkew = 1

// Skew returns a warning for each way the versions, by who runs them (a
// member's cluster ID), are beyond the supported skew: tagged releases
// more than SupportedMinorSkew minor versions or a major version apart,
// and untagged builds that differ from the others, whose skew cannot be
// judged. Empty versions (unknown) and Unstamped development builds are
// not judged.
func Skew(versions map[string]string) []string {
	type release struct {
		who, raw string
		v        *utilversion.Version
	}
	var releases []release
	var untagged []string
	distinct := map[string]bool{}
	for _, who := range slices.Sorted(maps.Keys(versions)) {
		raw := versions[who]
		if raw == "" || raw == Unstamped {
			continue
		}
		distinct[raw] = true
		v, err := utilversion.ParseSemantic(raw)
		if err != nil {
			untagged = append(untagged, fmt.Sprintf("%s (%s)", who, raw))
			continue
		}
		releases = append(releases, release{who, raw, v})
	}
	var warnings []string
	if len(releases) > 1 {
		sort.SliceStable(releases, func(i, j int) bool { return releases[i].v.LessThan(releases[j].v) })
		oldest, newest := releases[0], releases[len(releases)-1]
		if oldest.v.Major() != newest.v.Major() || newest.v.Minor()-oldest.v.Minor() > SupportedMinorSkew {
			warnings = append(warnings, fmt.Sprintf("%s runs %s and %s runs %s: more than the supported skew of %d minor version apart; upgrade the older members first, one minor version at a time",
				oldest.who, oldest.raw, newest.who, newest.raw, SupportedMinorSkew))
		}
	}
	if len(untagged) > 0 && len(distinct) > 1 {
		warnings = append(warnings, fmt.Sprintf("untagged builds among different versions, whose skew cannot be judged: %s; run tagged releases", strings.Join(untagged, ", ")))
	}
	return warnings
}

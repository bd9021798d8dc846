package verify

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestChoose(t *testing.T) {
	candidates := []Candidate{
		{Context: "west", ID: "w"},
		{Context: "east", ID: "e"},
		{Context: "east-admin", ID: "e"},
		{Context: "broker", ID: "b"},
		{Context: "gone", Err: errors.New("connection refused")},
		{Context: "north", ID: "n"},
	}
	members := []string{"e", "n", "s", "w"}
	for _, tc := range []struct {
		name   string
		narrow []string
		want   []string
		left   []string
		err    string
	}{
		{name: "every member, one context each", want: []string{"east", "north", "west"},
			left: []string{"broker: cluster b is not a member", "east-admin: the same cluster (e) as east", "gone: could not read its cluster ID: connection refused"}},
		{name: "--contexts narrows", narrow: []string{"west", "north"}, want: []string{"north", "west"}},
		{name: "--contexts naming a context that is not there", narrow: []string{"west", "south"}, err: `no context "south"`},
		{name: "--contexts naming a cluster that is not a member", narrow: []string{"west", "broker"}, err: "broker: cluster b is not a member"},
		{name: "--contexts naming a context that cannot be read", narrow: []string{"west", "gone"}, err: "gone: could not read its cluster ID"},
		{name: "one member", narrow: []string{"west"}, err: "two members at least; of the broker's members (e, n, s, w), the kubeconfig's contexts reach only west (cluster w)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Choose(candidates, members, tc.narrow)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Choose: %v, want an error saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, m := range got.Members {
				names = append(names, m.Context)
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("chose %v, want %v", names, tc.want)
			}
			for i, l := range tc.left {
				if i >= len(got.Left) || !strings.HasPrefix(got.Left[i], l) {
					t.Errorf("left out %q, want %q", got.Left, tc.left)
					break
				}
			}
		})
	}
	_, err := Choose(candidates, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "of the broker's members (none), the kubeconfig's contexts reach none; left out: ") {
		t.Errorf("no member: %v", err)
	}
}

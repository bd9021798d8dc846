package clusterid

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		id    string
		valid bool
	}{
		{"cluster-1", true},
		{"721ab723-13bc-11e5-aec2-42010af0021e", true},
		{"a", true},
		{"", false},
		{"Cluster1", false},
		{"has.dot", false},
		{"-leading", false},
		{"trailing-", false},
		{strings.Repeat("x", 63), true},
		{strings.Repeat("x", 64), false},
	} {
		err := Validate(tc.id)
		if (err == nil) != tc.valid {
			t.Errorf("Validate(%q) = %v, want valid=%v", tc.id, err, tc.valid)
		}
	}
}

func TestCheckExistingNamesBothValuesOnDisagreement(t *testing.T) {
	_, err := checkExisting("east", "west")
	if err == nil || !strings.Contains(err.Error(), `"east"`) || !strings.Contains(err.Error(), `"west"`) {
		t.Fatalf("error %v should name both values", err)
	}
	if id, err := checkExisting("east", ""); err != nil || id != "east" {
		t.Fatalf("checkExisting without flag = %q, %v", id, err)
	}
	if _, err := checkExisting("Not_Valid", ""); err == nil {
		t.Fatal("an invalid recorded ID must be an error")
	}
}

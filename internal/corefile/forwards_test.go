package corefile

import (
	"slices"
	"testing"
)

func TestForwardsFindsTheClustersetServerBlock(t *testing.T) {
	for _, tc := range []struct {
		name, corefile string
		want           []string
		found          bool
	}{{
		name: "the shipped snippet after the default block",
		corefile: `.:53 {
    errors
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
}
clusterset.local 243.in-addr.arpa 4.6.3.7.3.6.d.6.a.7.d.f.ip6.arpa {
    errors
    cache 5
    forward . 10.96.0.53
}
`,
		want: []string{"10.96.0.53"}, found: true,
	}, {
		name:     "a port and a trailing dot, several upstreams",
		corefile: "clusterset.local.:53 {\n  forward . dns://10.0.0.1:53 10.0.0.2 # two\n}\n",
		want:     []string{"dns://10.0.0.1:53", "10.0.0.2"}, found: true,
	}, {
		name:     "a forward only in another zone",
		corefile: ".:53 {\n  forward . 10.0.0.1\n}\nexample.com {\n  forward . 10.0.0.9\n}\n",
		found:    false,
	}, {
		name:     "commented out",
		corefile: "# clusterset.local {\n#   forward . 10.0.0.1\n# }\n",
		found:    false,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, found, err := Block(tc.corefile, "clusterset.local")
			if err != nil {
				t.Fatal(err)
			}
			got, err := Forwards(tc.corefile, "clusterset.local")
			if err != nil || found != tc.found || !slices.Equal(got, tc.want) {
				t.Errorf("Forwards = %v, %v (found %v); want %v (found %v)", got, err, found, tc.want, tc.found)
			}
		})
	}
}

package scale

import "testing"

func TestLbCountReadsTheSampleFromAMapListing(t *testing.T) {
	listing := `table ip mcsd {
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = { 10.1.0.5 . udp . 53 : goto lb-udp-7,
			     10.1.0.5 . tcp . 80 : goto lb-tcp-2,
			     110.1.0.1 . tcp . 80 : goto lb-tcp-9,
			     10.1.0.15 . tcp . 80 : goto lb-tcp-11 }
	}
}`
	for vip, want := range map[string]int{"10.1.0.5": 2, "10.1.0.15": 11, "110.1.0.1": 9} {
		got, err := lbCount(listing, vip)
		if err != nil || got != want {
			t.Errorf("lbCount(%s) = %d, %v; want %d", vip, got, err, want)
		}
	}
	if n, err := lbCount(listing, "10.1.0.1"); err == nil {
		t.Errorf("lbCount(10.1.0.1) = %d, want an error: the map has no such element", n)
	}
}

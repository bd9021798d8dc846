package main

import (
	"testing"

	"github.com/miekg/dns"
)

func TestFixedAnswerIsAValidAnswer(t *testing.T) {
	q := new(dns.Msg)
	q.SetQuestion("web.shop.svc.clusterset.local.", dns.TypeSRV)
	q.SetEdns0(1232, false)
	wire, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	answer, ok := fixedAnswer(nil, wire)
	if !ok {
		t.Fatal("no answer to a valid query")
	}
	var r dns.Msg
	if err := r.Unpack(answer); err != nil {
		t.Fatalf("the answer does not parse: %v", err)
	}
	if !r.Response || r.Id != q.Id || r.Rcode != dns.RcodeSuccess || len(r.Question) != 1 || r.Question[0] != q.Question[0] {
		t.Errorf("answer %v does not answer %v", &r, q)
	}
	a, isA := r.Answer[0].(*dns.A)
	if len(r.Answer) != 1 || !isA || a.Hdr.Name != q.Question[0].Name || a.A.String() != "127.0.0.1" || len(r.Extra) != 0 {
		t.Errorf("answer section %v, extra %v: want one A record of the question's name", r.Answer, r.Extra)
	}
	for _, bad := range [][]byte{nil, wire[:11], answer, wire[:len(wire)-20]} {
		if _, ok := fixedAnswer(nil, bad); ok {
			t.Errorf("answered %x", bad)
		}
	}
}

package readiness

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func TestTally(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers []PodAnswer
		done    bool
		count   string
		seen    string
	}{
		{"every pod answers", []PodAnswer{{Pod: "a"}, {Pod: "b"}, {Pod: "c"}}, true, "3/3 pods", ""},
		{"one does not", []PodAnswer{{Pod: "a"}, {Pod: "b", Err: errors.New("SERVFAIL")}}, false, "1/2 pods", "1 of 2 pods answer; b: SERVFAIL"},
		{"no pod", nil, false, "0/0 pods", "no pod of the cluster DNS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Tally(tc.answers)
			if o.Done != tc.done || o.Count != tc.count || !strings.Contains(o.Seen, tc.seen) {
				t.Fatalf("%+v, want done %v, count %q, seen %q", o, tc.done, tc.count, tc.seen)
			}
		})
	}
}

// Only mcsd's answer to the schema version counts: an upstream's NXDOMAIN
// for a clusterset name, or a server without the zone, does not.
func TestAnswered(t *testing.T) {
	q := new(dns.Msg)
	q.SetQuestion(Question, dns.TypeTXT)
	txt, err := dns.NewRR(Question + ` 5 IN TXT "1.1.0"`)
	if err != nil {
		t.Fatal(err)
	}
	mcsd := new(dns.Msg)
	mcsd.SetReply(q)
	mcsd.Answer = []dns.RR{txt}
	upstream := new(dns.Msg)
	upstream.SetRcode(q, dns.RcodeNameError)
	refused := new(dns.Msg)
	refused.SetRcode(q, dns.RcodeServerFailure)
	empty := new(dns.Msg)
	empty.SetReply(q)
	if err := Answered(mcsd); err != nil {
		t.Errorf("mcsd's answer: %v", err)
	}
	for name, m := range map[string]*dns.Msg{"NXDOMAIN": upstream, "SERVFAIL": refused, "no TXT": empty} {
		if err := Answered(m); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A question and its answer go over a stream as DNS over TCP frames them.
func TestExchangeTCPFramesTheMessages(t *testing.T) {
	txt, _ := dns.NewRR(Question + ` 5 IN TXT "1.1.0"`)
	reply := new(dns.Msg)
	reply.Answer = []dns.RR{txt}
	packed, err := reply.Pack()
	if err != nil {
		t.Fatal(err)
	}
	stream := &fakeStream{in: *bytes.NewBuffer(append([]byte{byte(len(packed) >> 8), byte(len(packed))}, packed...))}
	q := new(dns.Msg)
	q.SetQuestion(Question, dns.TypeTXT)
	got, err := exchangeTCP(stream, q)
	if err != nil || len(got.Answer) != 1 {
		t.Fatalf("exchangeTCP: %v, %v", got, err)
	}
	sent := stream.out.Bytes()
	if n := int(sent[0])<<8 | int(sent[1]); n != len(sent)-2 {
		t.Errorf("sent a frame of length %d holding %d bytes", n, len(sent)-2)
	}
	var asked dns.Msg
	if err := asked.Unpack(sent[2:]); err != nil || asked.Question[0].Name != Question {
		t.Errorf("sent %v, %v", asked.Question, err)
	}
	if _, err := exchangeTCP(&fakeStream{}, q); err == nil {
		t.Error("no answer on a closed stream: no error")
	}
}

type fakeStream struct{ in, out bytes.Buffer }

func (s *fakeStream) Read(p []byte) (int, error)  { return s.in.Read(p) }
func (s *fakeStream) Write(p []byte) (int, error) { return s.out.Write(p) }

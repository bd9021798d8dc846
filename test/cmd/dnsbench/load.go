package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// The load generator: workers that each keep one query outstanding over
// their own UDP socket (a closed loop), asking the sequence in turn, for a
// fixed time. It runs in its own process, pinned to its own core.

// loadResult is what one run measured; it travels as JSON from the load
// process to the driver.
type loadResult struct {
	Queries   int64         `json:"queries"`
	Lost      int64         `json:"lost"`
	Truncated int64         `json:"truncated"`
	Elapsed   time.Duration `json:"elapsed"`
	P50       time.Duration `json:"p50"`
	P99       time.Duration `json:"p99"`
	// ServerCPU is the CPU time the server process used during the run.
	ServerCPU time.Duration `json:"serverCPU"`
	// LoadCPU is the CPU time the load generator used: near Elapsed, the
	// generator and not the server set the pace.
	LoadCPU time.Duration `json:"loadCPU"`
}

func (r loadResult) qps() float64 { return float64(r.Queries) / r.Elapsed.Seconds() }

// lostAfter is how long a worker waits for an answer before counting the
// query lost and asking the next one.
const lostAfter = time.Second

// packQueries packs the sequence as EDNS0 queries (4096-byte buffer, as
// glibc and most stub resolvers ask today); IDs are set per send.
func packQueries(seq []probe) ([][]byte, error) {
	out := make([][]byte, len(seq))
	for i, p := range seq {
		m := new(dns.Msg)
		m.SetQuestion(p.name, p.qtype)
		m.SetEdns0(4096, false)
		b, err := m.Pack()
		if err != nil {
			return nil, fmt.Errorf("packing %s %s: %w", p.name, dns.TypeToString[p.qtype], err)
		}
		out[i] = b
	}
	return out, nil
}

// generate asks server the queries with workers workers for duration and
// returns what it measured.
func generate(server string, queries [][]byte, workers int, duration time.Duration) (loadResult, error) {
	type workerResult struct {
		latencies       []time.Duration
		lost, truncated int64
		err             error
	}
	results := make([]workerResult, workers)
	deadline := time.Now().Add(duration)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := &results[w]
			conn, err := net.Dial("udp", server)
			if err != nil {
				res.err = err
				return
			}
			defer conn.Close()
			buf := make([]byte, dns.MaxMsgSize)
			q := make([]byte, 0, 512)
			id := uint16(w << 10)
			for i := w * len(queries) / workers; time.Now().Before(deadline); i++ {
				q = append(q[:0], queries[i%len(queries)]...)
				id++
				binary.BigEndian.PutUint16(q, id)
				sent := time.Now()
				if _, err := conn.Write(q); err != nil {
					res.err = err
					return
				}
				if err := conn.SetReadDeadline(sent.Add(lostAfter)); err != nil {
					res.err = err
					return
				}
				for {
					n, err := conn.Read(buf)
					if err != nil {
						if errors.Is(err, os.ErrDeadlineExceeded) {
							res.lost++
							break
						}
						res.err = err
						return
					}
					// A late answer to a query counted lost: skip it.
					if n < 12 || binary.BigEndian.Uint16(buf) != id {
						continue
					}
					res.latencies = append(res.latencies, time.Since(sent))
					if buf[2]&0x02 != 0 {
						res.truncated++
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	out := loadResult{Elapsed: elapsed}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		out.LoadCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, r := range results {
		if r.err != nil {
			return out, r.err
		}
		all = append(all, r.latencies...)
		out.Lost += r.lost
		out.Truncated += r.truncated
	}
	out.Queries = int64(len(all))
	if len(all) == 0 {
		return out, fmt.Errorf("no answers from %s", server)
	}
	slices.Sort(all)
	out.P50 = all[len(all)*50/100]
	out.P99 = all[len(all)*99/100]
	return out, nil
}

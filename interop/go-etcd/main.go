// Command go-etcd-peer is the Go side of lockkit's etcd interop test and benchmark. It locks with
// etcd's own client/v3/concurrency.Mutex.
//
//	go-etcd-peer interop -endpoints 127.0.0.1:2379 -prefix lockkit/NAME -log FILE -iters 20 -hold 20ms
//	    locks the prefix ITERS times, appending "enter go <token>" / "exit go <token>" lines to FILE
//	    while holding it (the overlap detector reads that file).
//	go-etcd-peer bench -endpoints 127.0.0.1:2379 -prefix P -clients 8 -acquisitions 400 -cycles 300 [-server-pid PID]
//	    prints one JSON line: the uncontended lock+unlock cycle p50 and the 8-client contention
//	    throughput, p50/p99 wait and the busiest client's share; with -server-pid, also the
//	    server's CPU per contended acquisition (from /proc/PID/stat, over the contended clock),
//	    and always this process's own.
//	go-etcd-peer election-bench -endpoints 127.0.0.1:2379 -prefix P -rounds 30 -ttl 2
//	    concurrency.Election: prints one line "handover_p50_ms=… observe_p50_ms=… failover_ms=…"
//	    (resign → the waiting candidate's Campaign returns; resign → an Observe on a third
//	    session reports it; an orphaned leader session, never revoked as in a crash → the next
//	    candidate leads).
//	go-etcd-peer elect -endpoints 127.0.0.1:2379 -prefix P -value V
//	    concurrency.Election driven by stdin, for lockkit's election interop test: campaigns with
//	    V and prints "leading <create revision>", then per line "proclaim X" proclaims X (prints
//	    "proclaimed X"), and "resign" (or the end of stdin) resigns, prints "resigned" and exits.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: go-etcd-peer interop|bench [flags]")
		os.Exit(2)
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	endpoints := fs.String("endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	prefix := fs.String("prefix", "lockkit/interop", "lock prefix (concurrency.NewMutex pfx)")
	logFile := fs.String("log", "", "interop: file to append enter/exit records to")
	iters := fs.Int("iters", 20, "interop: how many times to lock")
	hold := fs.Duration("hold", 20*time.Millisecond, "interop: how long to hold each time")
	ttl := fs.Int("ttl", 10, "session TTL in seconds")
	clients := fs.Int("clients", 8, "bench: contending clients")
	acquisitions := fs.Int("acquisitions", 400, "bench: total contended acquisitions")
	cycles := fs.Int("cycles", 300, "bench: uncontended cycles")
	rounds := fs.Int("rounds", 30, "election-bench: resign hand-overs")
	value := fs.String("value", "go-candidate", "elect: the value to campaign with")
	serverPid := fs.Int("server-pid", 0, "bench: the etcd server's PID, to report its CPU per acquisition")
	_ = fs.Parse(os.Args[2:])
	eps := strings.Split(*endpoints, ",")
	switch mode {
	case "interop":
		interop(eps, *prefix, *logFile, *iters, *hold, *ttl)
	case "bench":
		bench(eps, *prefix, *clients, *acquisitions, *cycles, *ttl, *serverPid)
	case "election-bench":
		electionBench(eps, *prefix, *rounds, *ttl)
	case "elect":
		elect(eps, *prefix, *value, *ttl)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		os.Exit(2)
	}
}

func newSession(eps []string, ttl int) (*clientv3.Client, *concurrency.Session) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
	must(err)
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	must(err)
	return cli, s
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-etcd-peer:", err)
		os.Exit(1)
	}
}

func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	must(err)
	_, err = f.WriteString(line + "\n")
	must(err)
	must(f.Sync())
	must(f.Close())
}

func interop(eps []string, prefix, logFile string, iters int, hold time.Duration, ttl int) {
	cli, s := newSession(eps, ttl)
	defer cli.Close()
	defer s.Close()
	m := concurrency.NewMutex(s, prefix)
	for i := 0; i < iters; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		must(m.Lock(ctx))
		cancel()
		tok := m.Header().Revision
		appendLine(logFile, fmt.Sprintf("enter go %d %d", tok, time.Now().UnixNano()))
		time.Sleep(hold)
		appendLine(logFile, fmt.Sprintf("exit go %d %d", tok, time.Now().UnixNano()))
		must(m.Unlock(context.Background()))
		// Give the other side a chance to take the lock.
		time.Sleep(hold / 2)
	}
}

type benchResult struct {
	UncontendedP50Us float64 `json:"uncontended_p50_us"`
	ContendedPerSec  float64 `json:"contended_per_sec"`
	WaitP50Ms        float64 `json:"wait_p50_ms"`
	WaitP99Ms        float64 `json:"wait_p99_ms"`
	BusiestShare     float64 `json:"busiest_share"`
	// The server's CPU per contended acquisition, microseconds; -1 without -server-pid.
	ServerCPUUs float64 `json:"server_cpu_us"`
	// This process's CPU (the clients') per contended acquisition, microseconds.
	ClientCPUUs float64 `json:"client_cpu_us"`
}

// selfCPU is the CPU time (user + system) this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is the CPU time (user + system) process pid has used, from /proc/pid/stat (in
// hundredths of a second), or -1 when it cannot be read.
func procCPU(pid int) time.Duration {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(b)
	// The command name may hold spaces: count the fields from the last ')' (state is field 3,
	// utime 14 and stime 15).
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return -1
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	k, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(u+k) * 10 * time.Millisecond
}

func pct(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
	i := int(p * float64(len(xs)-1))
	return xs[i]
}

func bench(eps []string, prefix string, clients, acquisitions, cycles, ttl, serverPid int) {
	var res benchResult
	// Uncontended: one client, lock + unlock.
	{
		cli, s := newSession(eps, ttl)
		m := concurrency.NewMutex(s, prefix+"/uncontended")
		ctx := context.Background()
		var lat []time.Duration
		for i := 0; i < cycles; i++ {
			t := time.Now()
			must(m.Lock(ctx))
			must(m.Unlock(ctx))
			lat = append(lat, time.Since(t))
		}
		res.UncontendedP50Us = float64(pct(lat, 0.5).Microseconds())
		s.Close()
		cli.Close()
	}
	// Contended: `clients` sessions on one lock until `acquisitions` in total.
	{
		var left int64 = int64(acquisitions)
		var mu sync.Mutex
		var waits []time.Duration
		counts := make([]int, clients)
		var wg sync.WaitGroup
		sessions := make([]*concurrency.Session, clients)
		clis := make([]*clientv3.Client, clients)
		for i := range sessions {
			clis[i], sessions[i] = newSession(eps, ttl)
		}
		cpu0, self0 := procCPU(serverPid), selfCPU()
		start := time.Now()
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				m := concurrency.NewMutex(sessions[c], prefix+"/contended")
				ctx := context.Background()
				for atomic.AddInt64(&left, -1) >= 0 {
					t := time.Now()
					must(m.Lock(ctx))
					w := time.Since(t)
					must(m.Unlock(ctx))
					mu.Lock()
					waits = append(waits, w)
					counts[c]++
					mu.Unlock()
				}
			}(c)
		}
		wg.Wait()
		elapsed := time.Since(start)
		res.ClientCPUUs = float64((selfCPU() - self0).Microseconds()) / float64(acquisitions)
		res.ServerCPUUs = -1
		if cpu1 := procCPU(serverPid); cpu0 >= 0 && cpu1 >= 0 {
			res.ServerCPUUs = float64((cpu1 - cpu0).Microseconds()) / float64(acquisitions)
		}
		res.ContendedPerSec = float64(acquisitions) / elapsed.Seconds()
		res.WaitP50Ms = float64(pct(waits, 0.5).Microseconds()) / 1000
		res.WaitP99Ms = float64(pct(waits, 0.99).Microseconds()) / 1000
		busiest := 0
		for _, n := range counts {
			if n > busiest {
				busiest = n
			}
		}
		res.BusiestShare = float64(busiest) / float64(acquisitions)
		for i := range sessions {
			sessions[i].Close()
			clis[i].Close()
		}
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
}

func p50ms(xs []time.Duration) float64 {
	return float64(pct(xs, 0.5).Microseconds()) / 1000
}

func electionBench(eps []string, prefix string, rounds, ttl int) {
	ctx := context.Background()
	cliA, sA := newSession(eps, ttl)
	cliB, sB := newSession(eps, ttl)
	cliO, sO := newSession(eps, ttl)
	observed := concurrency.NewElection(sO, prefix).Observe(ctx)
	sessions := []*concurrency.Session{sA, sB}
	lead := concurrency.NewElection(sA, prefix)
	must(lead.Campaign(ctx, "c0"))
	var handover, observe []time.Duration
	for round := 1; round <= rounds; round++ {
		value := fmt.Sprintf("c%d", round)
		next := concurrency.NewElection(sessions[round%2], prefix)
		won := make(chan error, 1)
		go func() { won <- next.Campaign(ctx, value) }()
		time.Sleep(30 * time.Millisecond)
		t0 := time.Now()
		must(lead.Resign(ctx))
		must(<-won)
		handover = append(handover, time.Since(t0))
		for resp := range observed {
			if len(resp.Kvs) > 0 && string(resp.Kvs[0].Value) == value {
				observe = append(observe, time.Since(t0))
				break
			}
		}
		lead = next
	}
	must(lead.Resign(ctx))
	// Failover: the leader's session is orphaned (its keep-alive stops, its lease is never
	// revoked), as when its process dies; the next candidate leads once the lease expires.
	cliL, sL := newSession(eps, ttl)
	must(concurrency.NewElection(sL, prefix).Campaign(ctx, "doomed"))
	next := concurrency.NewElection(sB, prefix)
	won := make(chan error, 1)
	go func() { won <- next.Campaign(ctx, "after") }()
	time.Sleep(100 * time.Millisecond)
	sL.Orphan()
	t0 := time.Now()
	must(<-won)
	failover := time.Since(t0)
	must(next.Resign(ctx))
	fmt.Printf("election handover_p50_ms=%.2f observe_p50_ms=%.2f failover_ms=%.0f\n",
		p50ms(handover), p50ms(observe), float64(failover.Milliseconds()))
	cliL.Close()
	for _, s := range []*concurrency.Session{sA, sB, sO} {
		s.Close()
	}
	for _, c := range []*clientv3.Client{cliA, cliB, cliO} {
		c.Close()
	}
}

func elect(eps []string, prefix, value string, ttl int) {
	ctx := context.Background()
	cli, s := newSession(eps, ttl)
	defer cli.Close()
	defer s.Close()
	e := concurrency.NewElection(s, prefix)
	must(e.Campaign(ctx, value))
	fmt.Printf("leading %d\n", e.Rev())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		switch cmd {
		case "proclaim":
			must(e.Proclaim(ctx, arg))
			fmt.Printf("proclaimed %s\n", arg)
		case "resign":
			must(e.Resign(ctx))
			fmt.Println("resigned")
			return
		}
	}
	must(e.Resign(ctx))
	fmt.Println("resigned")
}

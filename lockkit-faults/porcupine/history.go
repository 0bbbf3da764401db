package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/anishathalye/porcupine"
)

// History is what lockkit-faults writes to a run's history.json: the holds of the run's lock (or
// of a multi-lock's members, each a lock of its own) and the fenced register's writes, every time
// in microseconds on one monotonic clock.
type History struct {
	// Permits is the lock's capacity in permits (1 for a mutex, an RW lock, an election).
	Permits int     `json:"permits"`
	Holds   []Hold  `json:"holds"`
	Writes  []Write `json:"writes"`
}

// Claim is what one hold claims: {"kind":"exclusive"}, {"kind":"shared"} or
// {"kind":"permits","n":N}.
type Claim struct {
	Kind string `json:"kind"`
	N    int    `json:"n,omitempty"`
}

// Hold is one acquire and what became of it, as its worker saw it.
type Hold struct {
	// Lock is empty for the run's one lock, a member's name for a multi-lock's members.
	Lock   string `json:"lock"`
	Worker int    `json:"worker"`
	Claim  Claim  `json:"claim"`
	Token  *int64 `json:"token"`
	// Invoked is when the acquire was called; Granted when it returned a guard (nil: its
	// outcome is unknown).
	Invoked int64  `json:"invoked"`
	Granted *int64 `json:"granted"`
	// Lost is when lost() resolved; Released when the holder stopped believing it held (the
	// last look that read it live). The earlier of the two ends the hold; nil for both: it never
	// ended.
	Lost     *int64 `json:"lost"`
	Released *int64 `json:"released"`
	// FreedBy is by when the lock was surely given up (a release that answered); nil: at a time
	// nobody saw.
	FreedBy *int64 `json:"freed_by"`
}

// Write is one write to the fenced register.
type Write struct {
	// Lock is the lock whose token the write carries; the register fences each lock on its own.
	Lock    string `json:"lock"`
	Worker  int    `json:"worker"`
	Token   int64  `json:"token"`
	Invoked int64  `json:"invoked"`
	// Completed is [when, accepted]; nil: no answer.
	Completed *[2]json.RawMessage `json:"completed"`
}

// Read parses a history.
func Read(r io.Reader) (History, error) {
	var h History
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return h, fmt.Errorf("bad history: %w", err)
	}
	if h.Permits < 1 {
		return h, fmt.Errorf("bad history: permits %d", h.Permits)
	}
	for i, hold := range h.Holds {
		switch hold.Claim.Kind {
		case "exclusive", "shared":
		case "permits":
			if hold.Claim.N < 1 {
				return h, fmt.Errorf("bad history: hold %d claims %d permits", i, hold.Claim.N)
			}
		default:
			return h, fmt.Errorf("bad history: hold %d claims %q", i, hold.Claim.Kind)
		}
	}
	return h, nil
}

// Operations turns the history into porcupine operations, each hold an acquire and an end:
//   - an acquire takes effect between its call and its return;
//   - a hold ends (the lock gives it up) no earlier than the instant its holder stopped
//     believing it held, and no later than its release's answer, or at any later time when
//     nobody saw it end (a lease that ran out, a killed holder);
//   - a write is decided by the register at once, accepted if its token is above every token
//     it accepted before.
//
// An acquire whose outcome is unknown is left out. Had it taken the lock, nobody was told:
// the hold ended at an unknown time, when its lease ran out, so it can delay later grants but
// never make one illegal; and it did not have to take it. Both forks of the model accept the
// same histories, so the check leaves the operation out rather than branch on it.
func (h History) Operations() ([]porcupine.Operation, error) {
	var ops []porcupine.Operation
	clients := map[int]int{}
	client := func(worker int) int {
		if c, ok := clients[worker]; ok {
			return c
		}
		clients[worker] = len(clients)
		return clients[worker]
	}
	last := int64(0)
	seen := func(t int64) {
		if t > last {
			last = t
		}
	}
	for _, hold := range h.Holds {
		for _, t := range []*int64{hold.Granted, hold.Lost, hold.Released, hold.FreedBy} {
			if t != nil {
				seen(*t)
			}
		}
		seen(hold.Invoked)
	}
	for _, w := range h.Writes {
		seen(w.Invoked)
	}
	never := last + 1
	for id, hold := range h.Holds {
		if hold.Granted == nil {
			continue
		}
		c := client(hold.Worker)
		token := int64(-1)
		if hold.Token != nil {
			token = *hold.Token
		}
		ops = append(ops, porcupine.Operation{
			ClientId: c,
			Input:    acquireIn{Lock: hold.Lock, Hold: id, Claim: hold.Claim},
			Call:     hold.Invoked,
			Output:   token,
			Return:   *hold.Granted,
		})
		end := earliest(hold.Lost, hold.Released)
		if end == nil {
			continue // believed to the end of the history
		}
		call := max(*end, *hold.Granted)
		ret := never
		if hold.FreedBy != nil {
			ret = max(*hold.FreedBy, call)
		}
		ops = append(ops, porcupine.Operation{
			ClientId: c,
			Input:    endIn{Lock: hold.Lock, Hold: id},
			Call:     call,
			Return:   ret,
		})
	}
	for _, w := range h.Writes {
		if w.Completed == nil {
			continue // no answer: the register never decided it
		}
		var at int64
		var accepted bool
		if err := json.Unmarshal(w.Completed[0], &at); err != nil {
			return nil, fmt.Errorf("bad write: %w", err)
		}
		if err := json.Unmarshal(w.Completed[1], &accepted); err != nil {
			return nil, fmt.Errorf("bad write: %w", err)
		}
		ops = append(ops, porcupine.Operation{
			ClientId: client(w.Worker),
			Input:    writeIn{Lock: w.Lock, Token: w.Token},
			Call:     at,
			Output:   accepted,
			Return:   at,
		})
	}
	return ops, nil
}

func earliest(a, b *int64) *int64 {
	switch {
	case a == nil:
		return b
	case b == nil || *a <= *b:
		return a
	default:
		return b
	}
}

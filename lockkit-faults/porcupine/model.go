package main

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// acquireIn is an acquire that returned a guard: its output is the guard's fencing token (-1:
// the primitive has none).
type acquireIn struct {
	Lock  string
	Hold  int
	Claim Claim
}

// endIn is the lock giving a hold up.
type endIn struct {
	Lock string
	Hold int
}

// writeIn is a write to the fenced register: its output is whether the register accepted it.
type writeIn struct {
	Lock  string
	Token int64
}

// lockOf is the lock an operation is on.
func lockOf(input interface{}) string {
	switch in := input.(type) {
	case acquireIn:
		return in.Lock
	case endIn:
		return in.Lock
	case writeIn:
		return in.Lock
	}
	return ""
}

// byLock checks each lock on its own (a multi-lock's members are locks of their own).
func byLock(history []porcupine.Operation) [][]porcupine.Operation {
	index := map[string]int{}
	var parts [][]porcupine.Operation
	for _, op := range history {
		lock := lockOf(op.Input)
		i, ok := index[lock]
		if !ok {
			i = len(parts)
			index[lock] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

// held is one hold the lock has granted and not given up.
type held struct {
	Hold  int
	Claim Claim
	Token int64
}

// lockState is the lock with fencing tokens and the register it protects.
type lockState struct {
	// Held is sorted by hold id.
	Held []held
	// Last is the largest token granted (-1: none yet).
	Last int64
	// Register is the largest token the register accepted (-1: none yet).
	Register int64
}

func (s lockState) with(h held) lockState {
	out := make([]held, 0, len(s.Held)+1)
	out = append(out, s.Held...)
	out = append(out, h)
	sort.Slice(out, func(i, j int) bool { return out[i].Hold < out[j].Hold })
	s.Held = out
	return s
}

func (s lockState) without(hold int) (lockState, bool) {
	for i, h := range s.Held {
		if h.Hold == hold {
			out := make([]held, 0, len(s.Held)-1)
			out = append(out, s.Held[:i]...)
			out = append(out, s.Held[i+1:]...)
			s.Held = out
			return s, true
		}
	}
	return s, false
}

// admits says whether the lock, holding what s holds, may grant claim c with `permits` permits
// in all.
func (s lockState) admits(c Claim, permits int) bool {
	used := 0
	for _, h := range s.Held {
		switch {
		case c.Kind == "permits" && h.Claim.Kind == "permits":
			used += h.Claim.N
		case c.Kind == "shared" && h.Claim.Kind == "shared":
		default:
			return false
		}
	}
	if c.Kind == "permits" {
		return used+c.N <= permits
	}
	return true
}

// LockModel is a lock of `permits` permits whose grants carry strictly increasing fencing
// tokens, and a register that accepts a write only above every token it accepted before; a
// history of several locks is checked lock by lock.
// Exclusive claims hold alone, shared claims only with each other, permit claims up to the
// capacity.
func LockModel(permits int) porcupine.Model {
	return porcupine.Model{
		Partition: byLock,
		Init:      func() interface{} { return lockState{Last: -1, Register: -1} },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			s := state.(lockState)
			switch in := input.(type) {
			case acquireIn:
				token := output.(int64)
				if !s.admits(in.Claim, permits) {
					return false, s
				}
				if token >= 0 {
					if token <= s.Last {
						return false, s
					}
					s.Last = token
				}
				return true, s.with(held{Hold: in.Hold, Claim: in.Claim, Token: token})
			case endIn:
				next, ok := s.without(in.Hold)
				return ok, next
			case writeIn:
				accepted := output.(bool)
				if accepted != (in.Token > s.Register) {
					return false, s
				}
				if accepted {
					s.Register = in.Token
				}
				return true, s
			}
			return false, s
		},
		Equal: func(a, b interface{}) bool {
			x, y := a.(lockState), b.(lockState)
			if x.Last != y.Last || x.Register != y.Register || len(x.Held) != len(y.Held) {
				return false
			}
			for i := range x.Held {
				if x.Held[i] != y.Held[i] {
					return false
				}
			}
			return true
		},
		Hash: func(state interface{}) uint64 {
			s := state.(lockState)
			f := fnv.New64a()
			fmt.Fprintf(f, "%d/%d", s.Last, s.Register)
			for _, h := range s.Held {
				fmt.Fprintf(f, "/%d", h.Hold)
			}
			return f.Sum64()
		},
		DescribeOperation: func(input, output interface{}) string {
			switch in := input.(type) {
			case acquireIn:
				return fmt.Sprintf("acquire %s#%d %s -> token %d", in.Lock, in.Hold, claimText(in.Claim), output)
			case endIn:
				return fmt.Sprintf("end #%d", in.Hold)
			case writeIn:
				verdict := "rejected"
				if output.(bool) {
					verdict = "accepted"
				}
				return fmt.Sprintf("write token %d -> %s", in.Token, verdict)
			}
			return fmt.Sprintf("%v -> %v", input, output)
		},
		DescribeState: func(state interface{}) string {
			s := state.(lockState)
			parts := make([]string, 0, len(s.Held))
			for _, h := range s.Held {
				parts = append(parts, fmt.Sprintf("#%d %s token %d", h.Hold, claimText(h.Claim), h.Token))
			}
			return fmt.Sprintf("held [%s], last token %d, register %d", strings.Join(parts, ", "), s.Last, s.Register)
		},
	}
}

func claimText(c Claim) string {
	if c.Kind == "permits" {
		return fmt.Sprintf("%d permits", c.N)
	}
	return c.Kind
}

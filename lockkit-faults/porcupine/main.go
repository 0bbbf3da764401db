// Command porcupine checks a lockkit-faults history for linearizability against a lock with
// fencing tokens (see LockModel), using Porcupine.
//
//	porcupine -history out/history.json [-html out/porcupine.html] [-timeout 60s]
//
// It prints one JSON line: {"result":"Ok"|"Illegal"|"Unknown","operations":N,"html":PATH}.
// "Unknown" means the search ran out of time. The visualisation is written only for a result
// that is not Ok. Exit status 0 for any result, 2 for a history it cannot read.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

type verdict struct {
	Result     porcupine.CheckResult `json:"result"`
	Operations int                   `json:"operations"`
	HTML       string                `json:"html,omitempty"`
}

func main() {
	path := flag.String("history", "", "the run's history.json")
	html := flag.String("html", "", "where to write the visualisation of a result that is not Ok")
	timeout := flag.Duration("timeout", time.Minute, "give up (result Unknown) after this long")
	flag.Parse()
	if err := run(*path, *html, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "porcupine:", err)
		os.Exit(2)
	}
}

func run(path, html string, timeout time.Duration) error {
	if path == "" {
		return fmt.Errorf("-history is required")
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h, err := Read(f)
	if err != nil {
		return err
	}
	v, err := Check(h, html, timeout)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(v)
}

// Check checks h; for a result that is not Ok it writes the visualisation to html (if set).
func Check(h History, html string, timeout time.Duration) (verdict, error) {
	ops, err := h.Operations()
	if err != nil {
		return verdict{}, err
	}
	model := LockModel(h.Permits)
	result, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	v := verdict{Result: result, Operations: len(ops)}
	if result != porcupine.Ok && html != "" {
		if err := porcupine.VisualizePath(model, info, html); err != nil {
			return v, fmt.Errorf("cannot write %s: %w", html, err)
		}
		v.HTML = html
	}
	return v, nil
}

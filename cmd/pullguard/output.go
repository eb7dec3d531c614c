package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/node"
)

// runOutput is the -o json document of `pullguard run` (a contract).
type runOutput struct {
	Results []node.Result `json:"results"`
	Events  []node.Event  `json:"events"`
}

func writeJSON(w io.Writer, results []node.Result, events []node.Event) error {
	if results == nil {
		results = []node.Result{}
	}
	if events == nil {
		events = []node.Event{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(runOutput{Results: results, Events: events})
}

// outcome is the result column: the kubelet's reason on failure, else
// whether the image was pulled or used as present.
func outcome(r node.Result) string {
	switch {
	case r.Error != "":
		return r.Error
	case r.Pulled:
		return "pulled"
	default:
		return "present"
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func writeTable(w io.Writer, results []node.Result, events []node.Event) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tCONTAINER\tIMAGE\tPOLICY\tRESULT\tREGISTRY\tWHY")
	for _, r := range results {
		name := r.Container
		if r.Init {
			name += " (init)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Pod, name, r.Image, r.PullPolicy, outcome(r), yesNo(r.Pulled), why(r))
	}
	tw.Flush()
	writeEvents(w, events)
}

// why explains the decision in words: the tracker's reason, and for a
// pull of a present image whether the registry verified or refused it.
func why(r node.Result) string {
	if r.Decision.Reason == 0 {
		return "-"
	}
	reason := strings.ReplaceAll(r.Decision.Reason.String(), "_", " ")
	switch {
	case r.Decision.Reason == credtracker.ReasonAbsent || r.Decision.Reason == credtracker.ReasonAlways || !r.Pulled:
		return reason
	case r.Error == "":
		return "verified by the registry (" + reason + ")"
	default:
		return "refused by the registry (" + reason + ")"
	}
}

func writeEvents(w io.Writer, events []node.Event) {
	if len(events) == 0 {
		return
	}
	fmt.Fprintln(w, "\nEVENTS")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OBJECT\tTYPE\tREASON\tMESSAGE")
	for _, e := range events {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Object, e.Type, e.Reason, e.Message)
	}
	tw.Flush()
}

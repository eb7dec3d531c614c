package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/podworkers"
)

// RunAPIVersion versions the -o json and -o yaml document of `pullguard
// run` (docs/operations.md, "The run output contract"). Fields are only
// ever added within a version; a removed or changed field makes a new one.
const RunAPIVersion = "pullguard.io/v1"

// Output formats of run and records.
const (
	formatTable = "table"
	formatWide  = "wide"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

func checkFormat(f string) error {
	switch f {
	case formatTable, formatWide, formatJSON, formatYAML:
		return nil
	}
	return fmt.Errorf("--output must be table, wide, json or yaml, not %q", sanitize(f))
}

// runOutput is the -o json|yaml document of `pullguard run` (a contract).
type runOutput struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Results    []resultOutput     `json:"results"`
	Events     []podworkers.Event `json:"events"`
	// Interrupted names the signal that stopped the run ("SIGTERM"); the
	// results then cover only the containers processed before it.
	Interrupted string `json:"interrupted,omitempty"`
}

type resultOutput struct {
	// The fields of the first contract, unchanged.
	Pod        string `json:"pod"`
	Container  string `json:"container"`
	Image      string `json:"image"`
	PullPolicy string `json:"pullPolicy"`
	ImageRef   string `json:"imageRef"`
	Pulled     bool   `json:"pulled"`
	Error      string `json:"error"`
	Message    string `json:"message"`
	// Added in pullguard.io/v1.
	Init     bool           `json:"init"`
	Decision decisionOutput `json:"decision"`
	Registry string         `json:"registry,omitempty"`
	Why      string         `json:"why"`
}

type decisionOutput struct {
	Action string `json:"action"`
	Reason string `json:"reason"`
}

func newRunOutput(results []podworkers.Result, events []podworkers.Event, interrupted string) runOutput {
	out := runOutput{APIVersion: RunAPIVersion, Kind: "RunResult", Results: []resultOutput{}, Events: events, Interrupted: interrupted}
	if out.Events == nil {
		out.Events = []podworkers.Event{}
	}
	for _, r := range results {
		d := decisionOutput{}
		if r.Decision.Reason != 0 {
			d = decisionOutput{Action: r.Decision.Action.String(), Reason: r.Decision.Reason.String()}
		}
		out.Results = append(out.Results, resultOutput{
			Pod: r.Pod, Container: r.Container, Image: r.Image, PullPolicy: string(r.PullPolicy), ImageRef: r.ImageRef,
			Pulled: r.Pulled, Error: r.Error, Message: r.Message, Init: r.Init, Decision: d, Registry: r.Registry, Why: why(r),
		})
	}
	return out
}

// writeStructured prints doc as indented JSON or as YAML when format asks
// for one of them, and says whether it did.
func writeStructured(w io.Writer, format string, doc any) (bool, error) {
	switch format {
	case formatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return true, enc.Encode(doc)
	case formatYAML:
		data, err := yaml.Marshal(doc)
		if err != nil {
			return true, err
		}
		_, err = w.Write(data)
		return true, err
	}
	return false, nil
}

// writeRun prints the outcome of a run in format.
func writeRun(w io.Writer, format string, doc runOutput) error {
	if structured, err := writeStructured(w, format, doc); structured {
		return err
	}
	wide := format == formatWide
	width := fitWidth(w, format)
	t := &table{cols: []column{{header: "POD", min: 12}, {header: "CONTAINER", min: 9}, {header: "IMAGE", min: 24, first: true}, {header: "RESULT", min: 8}, {header: "WHY", min: 20, cutEnd: true}}}
	if wide {
		t.cols = []column{{header: "POD"}, {header: "CONTAINER"}, {header: "INIT"}, {header: "IMAGE"}, {header: "POLICY"}, {header: "RESULT"}, {header: "REGISTRY"}, {header: "WHY"}, {header: "IMAGE REF"}}
	}
	for _, r := range doc.Results {
		name := r.Container
		if r.Init && !wide {
			name += " (init)"
		}
		result := r.Error
		if result == "" {
			result = "present"
			if r.Pulled {
				result = "pulled"
			}
		}
		if wide {
			reg := r.Registry
			if reg == "" {
				reg = "-"
			}
			t.add(r.Pod, name, yesNo(r.Init), r.Image, r.PullPolicy, result, reg, r.Why, orDash(r.ImageRef))
		} else {
			t.add(r.Pod, name, r.Image, result, r.Why)
		}
	}
	if err := t.write(w, width); err != nil {
		return err
	}
	if err := writeEvents(w, doc.Events, wide, width); err != nil {
		return err
	}
	if doc.Interrupted != "" {
		fmt.Fprintf(w, "\nINTERRUPTED by %s: the containers not listed were not processed.\n", doc.Interrupted)
	}
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// why explains the decision in words: the tracker's reason, and for a
// pull of a present image whether the registry verified it, refused it, or
// could not be reached.
func why(r podworkers.Result) string {
	if r.Decision.Reason == 0 {
		return "-"
	}
	reason := strings.ReplaceAll(r.Decision.Reason.String(), "_", " ")
	if r.Decision.Reason == credtracker.ReasonAbsent || r.Decision.Reason == credtracker.ReasonAlways || !r.Pulled {
		if r.Pulled && r.Registry == podworkers.RegistryUnreachable {
			return "registry unreachable (" + reason + ")"
		}
		return reason
	}
	switch r.Registry {
	case podworkers.RegistryAccepted:
		return "verified by the registry (" + reason + ")"
	case podworkers.RegistryRefused:
		return "refused by the registry (" + reason + ")"
	case podworkers.RegistryUnreachable:
		return "registry unreachable (" + reason + ")"
	default:
		return "verification failed (" + reason + ")"
	}
}

// outcome is the result column: the kubelet's reason on failure, else
// whether the image was pulled or used as present.
func outcome(r podworkers.Result) string {
	switch {
	case r.Error != "":
		return r.Error
	case r.Pulled:
		return "pulled"
	default:
		return "present"
	}
}

// writeEvents prints events under an EVENTS heading, in the columns of -o
// wide or, fitted to width, in the default ones.
func writeEvents(w io.Writer, events []podworkers.Event, wide bool, width int) error {
	if len(events) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nEVENTS")
	e := &table{cols: []column{{header: "OBJECT", min: 12}, {header: "TYPE", min: 7}, {header: "REASON", min: 17}, {header: "MESSAGE", min: 30, cutEnd: true}}}
	if wide {
		e.cols = []column{{header: "TIME"}, {header: "OBJECT"}, {header: "FIELD"}, {header: "TYPE"}, {header: "REASON"}, {header: "SOURCE"}, {header: "MESSAGE"}}
	}
	for _, ev := range events {
		if wide {
			e.add(ev.Time.UTC().Format("2006-01-02T15:04:05.000Z07:00"), ev.Object, orDash(ev.FieldPath), ev.Type, ev.Reason, ev.Source.Component, ev.Message)
		} else {
			e.add(ev.Object, ev.Type, ev.Reason, ev.Message)
		}
	}
	return e.write(w, width)
}

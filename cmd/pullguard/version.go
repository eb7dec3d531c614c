package main

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/component-base/version"
)

// errVersionPrinted ends a run after --version printed the version.
var errVersionPrinted = errors.New("version printed")

func versionFlagValue() string {
	if f := pflag.CommandLine.Lookup("version"); f != nil {
		return f.Value.String()
	}
	return "false"
}

func versionRequested() bool {
	v := versionFlagValue()
	return v == "true" || v == "raw"
}

// printVersionIfRequested prints the version for --version (one line) or
// --version=raw (every field), as the kubelet does, but under pullguard's
// name. A binary built without version stamps reports the VCS revision
// the Go toolchain recorded.
func printVersionIfRequested(w io.Writer) error {
	info := version.Get()
	if strings.Contains(info.GitVersion, "$Format") {
		info.GitVersion = "v0.0.0-dev"
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" && len(s.Value) >= 12 {
					info.GitVersion += "+" + s.Value[:12]
					info.GitCommit = s.Value
				}
			}
		}
	}
	if strings.Contains(info.GitCommit, "$Format") {
		info.GitCommit = ""
	}
	switch versionFlagValue() {
	case "raw":
		_, err := fmt.Fprintf(w, "%#v\n", info)
		return err
	case "true":
		_, err := fmt.Fprintf(w, "pullguard %s\n", info.GitVersion)
		return err
	}
	return nil
}

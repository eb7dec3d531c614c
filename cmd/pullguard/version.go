package main

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/spf13/pflag"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
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

// buildVersion is component-base's version.Get(): the fields `make
// release` stamps with -X (gitVersion, gitCommit, gitTreeState, buildDate,
// gitMajor, gitMinor). A binary built without the stamps reports
// v0.0.0-dev, with the VCS revision the Go toolchain recorded if it
// recorded one, instead of component-base's $Format placeholders.
func buildVersion() apimachineryversion.Info {
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
	return info
}

// printVersionIfRequested prints the version for --version (one line) or
// --version=raw (every field), as the kubelet does, but under pullguard's
// name.
func printVersionIfRequested(w io.Writer) error {
	info := buildVersion()
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

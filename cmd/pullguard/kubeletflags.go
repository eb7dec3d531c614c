package main

import (
	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

// The kubelet's flags files doctor reads by default.
var defaultKubeletFlagsFiles = nodeinstall.DefaultFlagsFiles

// kubeletFlag is a kubelet flag found in a flags file.
type kubeletFlag struct {
	value string
	file  string
	line  int
}

// where is the place to change the flag: "file:line".
func (f kubeletFlag) where() string {
	return nodeinstall.Flag{Value: f.value, File: f.file, Line: f.line}.Where()
}

// readKubeletFlags reads the KUBELET_*ARGS variables of the flags files
// (missing files are skipped), with nodeinstall's reader, and returns each
// flag's last value, by name without the dashes.
func readKubeletFlags(files []string) (map[string]kubeletFlag, error) {
	flags, err := nodeinstall.ReadFlagsFiles(files)
	if err != nil {
		return nil, err
	}
	out := make(map[string]kubeletFlag, len(flags))
	for name, f := range flags {
		out[name] = kubeletFlag{value: f.Value, file: f.File, line: f.Line}
	}
	return out, nil
}

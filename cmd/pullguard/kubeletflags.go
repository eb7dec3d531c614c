package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
)

// The kubelet's flags files, in the order the kubelet's systemd unit puts
// them on its command line (the last value of a flag wins): kubeadm's, then
// the distribution's KUBELET_EXTRA_ARGS.
var defaultKubeletFlagsFiles = []string{"/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet", "/etc/sysconfig/kubelet"}

// kubeletFlag is a kubelet flag found in a flags file.
type kubeletFlag struct {
	value string
	file  string
	line  int
}

// where is the place to change the flag: "file:line".
func (f kubeletFlag) where() string { return fmt.Sprintf("%s:%d", f.file, f.line) }

// kubeletBoolFlags are the kubelet flags doctor reads that take no
// separate value ("--serialize-image-pulls" alone means true).
var kubeletBoolFlags = map[string]bool{"serialize-image-pulls": true}

var envLine = regexp.MustCompile(`^\s*(?:export\s+)?(KUBELET_[A-Z_]*ARGS)=(.*)$`)

// readKubeletFlags reads the KUBELET_*ARGS variables of the flags files
// (missing files are skipped) and returns each flag's last value, by name
// without the dashes.
func readKubeletFlags(files []string) (map[string]kubeletFlag, error) {
	flags := map[string]kubeletFlag{}
	for _, path := range files {
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("kubelet flags file: %w", err)
		}
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			m := envLine.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			args := strings.Fields(unquoteEnv(strings.TrimSpace(m[2])))
			for i := 0; i < len(args); i++ {
				name, ok := strings.CutPrefix(args[i], "--")
				if !ok {
					continue
				}
				value, hasValue := "", false
				if k, v, found := strings.Cut(name, "="); found {
					name, value, hasValue = k, v, true
				}
				switch {
				case hasValue:
				case kubeletBoolFlags[name]:
					value = "true"
				case i+1 < len(args) && !strings.HasPrefix(args[i+1], "-"):
					i++
					value = args[i]
				}
				flags[name] = kubeletFlag{value: value, file: path, line: n}
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("kubelet flags file %s: %w", path, err)
		}
	}
	return flags, nil
}

// unquoteEnv removes the quotes around an environment file's value.
func unquoteEnv(v string) string {
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		return v[1 : len(v)-1]
	}
	return v
}

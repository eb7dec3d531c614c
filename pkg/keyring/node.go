package keyring

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/pkg/credential"
)

// Node docker config file names.
const (
	// ConfigJSONFile is the docker CLI's config file ({"auths": {...}}).
	ConfigJSONFile = "config.json"
	// DockercfgFile is the legacy docker config file (a bare map).
	DockercfgFile = ".dockercfg"
)

// maxConfigFileSize bounds how much of a node config file is read.
const maxConfigFileSize = 10 << 20

// DefaultNodeConfigFiles returns the files this process would search for
// the node's docker credentials if it were the kubelet: NodeConfigFiles
// with its own $HOME and working directory, read at the call (the kubelet
// reads $HOME once at start). The kubelet's search is that of the
// kubelet's environment: serve is given the kubelet's HOME and working
// directory by its unit (pullguard install), and code that reads for
// another process uses NodeConfigFiles with that process's.
func DefaultNodeConfigFiles(rootDir string) []string {
	home, _ := os.UserHomeDir() // "" when HOME is unset, as the kubelet's homeDirPath
	wd, _ := os.Getwd()         // "" when there is none: relative paths are left out
	return NodeConfigFiles(rootDir, home, wd)
}

// NodeConfigFiles returns the files a kubelet with the root directory
// rootDir, the $HOME home and the working directory workDir searches for
// the node's docker credentials, in its order (ReadDockerConfigFile in
// k8s.io/kubernetes pkg/credentialprovider, with the kubelet's root
// directory as its preferred path): config.json in rootDir, in the working
// directory, in $HOME/.docker and in /.docker; then .dockercfg in rootDir,
// the working directory, $HOME and /.
//
// As in the kubelet, each directory is joined with the file name and made
// absolute against the working directory: an empty rootDir is the working
// directory, and so is an empty home (the kubelet's os.UserHomeDir fails
// when HOME is unset, and it then searches ".docker/config.json" and
// ".dockercfg" relative to its working directory: /.docker under systemd,
// whose default working directory is /). A relative home is relative to
// workDir too. With workDir "" (the kubelet has none) a relative path is
// left out, as the kubelet skips a path filepath.Abs fails on, and no file
// is listed twice (a repeated file cannot be the first one found).
func NodeConfigFiles(rootDir, home, workDir string) []string {
	jsonDirs := []string{rootDir, "", filepath.Join(home, ".docker"), filepath.Join("/", ".docker")}
	cfgDirs := []string{rootDir, "", home, "/"}
	var files []string
	seen := make(map[string]bool)
	add := func(dir, name string) {
		f := filepath.Join(dir, name)
		if !filepath.IsAbs(f) {
			if !filepath.IsAbs(workDir) {
				return
			}
			f = filepath.Join(workDir, f)
		}
		if seen[f] {
			return
		}
		seen[f] = true
		files = append(files, f)
	}
	for _, d := range jsonDirs {
		add(d, ConfigJSONFile)
	}
	for _, d := range cfgDirs {
		add(d, DockercfgFile)
	}
	return files
}

// NodeKeyring returns the keyring of the node's docker config: the first
// of files that exists and parses (see DefaultNodeConfigFiles for the
// kubelet's list). A file named .dockercfg is read as the legacy format,
// any other as config.json. Every credential's Source is SourceNode with
// the file's path as its Name: every pod on the node may use it.
//
// As in the kubelet, a file that cannot be read or parsed is passed over
// for the next one. Those files, and entries whose key is not a valid
// pattern (skipped alone), are reported in the returned error as joined
// *ConfigFileError values; the keyring is never nil and is empty when no
// file was found. h must not be nil.
func NodeKeyring(h *credential.Hasher, files []string) (Keyring, error) {
	kr, _, err := readNode(h, files)
	return kr, err
}

// readNode is NodeKeyring that also returns the index in files of the file
// it used, len(files) when none.
func readNode(h *credential.Hasher, files []string) (*Static, int, error) {
	var errs []error
	for i, path := range files {
		if path == "" {
			continue
		}
		parsed, err := readConfigFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			klog.V(5).InfoS("No node docker config here", "path", path)
			continue
		}
		if err != nil {
			errs = append(errs, &ConfigFileError{Path: path, Err: err})
			continue
		}
		src := credential.Source{Kind: credential.SourceNode, Name: path}
		entries := make([]*entry, 0, len(parsed))
		for _, ce := range parsed {
			key, err := ConfigKey(ce.Key)
			if err != nil {
				errs = append(errs, &ConfigFileError{Path: path, Err: err})
				continue
			}
			entries = append(entries, &entry{key: key, auth: ce.Auth, source: src})
		}
		klog.V(2).InfoS("Using node docker config", "path", path, "entries", len(entries))
		return &Static{newIndex(h, entries)}, i, errors.Join(errs...)
	}
	return &Static{newIndex(h, nil)}, len(files), errors.Join(errs...)
}

// readConfigFile reads and parses one node config file. Its error is
// fs.ErrNotExist-compatible when the file is absent.
func readConfigFile(path string) ([]ConfigEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read: %w", err)
	}
	if len(data) > maxConfigFileSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidDockerConfig, maxConfigFileSize)
	}
	if filepath.Base(path) == DockercfgFile {
		return ParseDockercfg(data)
	}
	return ParseDockerConfigJSON(data)
}

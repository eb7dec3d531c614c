// Command release builds a pullguard release into a dist directory: static
// linux binaries stamped with the version, the commit and the commit's
// date; a .deb and an .rpm per architecture, built with nfpm; and
// an image per architecture (a docker-archive each, and an OCI archive of
// the index of all of them: image.go); and SHA256SUMS. Everything in it is a function of the commit, the version and
// the Go toolchain: the build date is the commit's date, never the clock,
// so two builds of one commit are byte-identical.
//
//	go run ./tools/release -C ../.. -version v1.2.3 -dist dist
//
// It is `make release VERSION=v1.2.3`. `make image VERSION=v1.2.3` builds
// the binaries and images only (-image-only), and PUSH=REF pushes the
// index of the images to a registry (-push).
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
	"github.com/goreleaser/nfpm/v2/rpm"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.repo, "C", ".", "the pullguard repository's top directory")
	fs.StringVar(&o.version, "version", "", "the release's version: semver with a leading v, e.g. v1.2.3 or v1.3.0-rc.1")
	fs.StringVar(&o.dist, "dist", "dist", "the directory to write (relative to -C); it must be missing or empty")
	fs.BoolVar(&o.clean, "clean", false, "remove the dist directory first, once the version is accepted")
	fs.BoolVar(&o.imageOnly, "image-only", false, "build the binaries and images only, no .deb or .rpm")
	fs.StringVar(&o.push, "push", "", "push the index of the images built to this reference (e.g. 127.0.0.1:5000/pullguard/pullguard:v1.2.3), with the docker config's credentials")
	arches := fs.String("arch", "amd64,arm64", "comma-separated linux architectures")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o.arches = strings.Split(*arches, ",")
	if !filepath.IsAbs(o.dist) {
		o.dist = filepath.Join(o.repo, o.dist)
	}
	start := time.Now()
	artifacts, err := release(o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "release: %v\n", err)
		return 1
	}
	for _, a := range artifacts {
		fmt.Fprintf(stdout, "%s  %d bytes\n", filepath.Join(o.dist, a.name), a.size)
	}
	fmt.Fprintf(stdout, "release %s written to %s in %s\n", o.version, o.dist, time.Since(start).Round(time.Second))
	return 0
}

type options struct {
	repo, version, dist string
	arches              []string
	clean, imageOnly    bool
	push                string
}

// stamp is what a release binary carries: component-base's version
// variables, set with -X.
type stamp struct {
	version, major, minor string
	commit, treeState     string
	// date is the commit's committer date, in UTC.
	date time.Time
}

// buildDate is the date in component-base's format (date -u +'%Y-%m-%dT%H:%M:%SZ').
func (s stamp) buildDate() string { return s.date.UTC().Format("2006-01-02T15:04:05Z") }

// ldflags: -s -w strip the symbol table and DWARF, as Kubernetes' release
// builds do; panics still name functions and lines.
func (s stamp) ldflags() string {
	const pkg = "k8s.io/component-base/version"
	vars := []struct{ name, value string }{
		{"gitVersion", s.version},
		{"gitMajor", s.major},
		{"gitMinor", s.minor},
		{"gitCommit", s.commit},
		{"gitTreeState", s.treeState},
		{"buildDate", s.buildDate()},
	}
	flags := []string{"-s", "-w"}
	for _, v := range vars {
		flags = append(flags, "-X", pkg+"."+v.name+"="+v.value)
	}
	return strings.Join(flags, " ")
}

// semverTag is semver 2.0 with a leading v and all three numbers
// (semver.org's regular expression).
var semverTag = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// parseVersion refuses anything but vMAJOR.MINOR.PATCH[-pre][+build] and
// gives gitMajor and gitMinor as Kubernetes derives them: the minor gets a
// "+" when anything follows the patch number.
func parseVersion(v string) (major, minor string, err error) {
	if !semverTag.MatchString(v) {
		return "", "", fmt.Errorf("VERSION %q is not a semantic version with a leading v (vMAJOR.MINOR.PATCH, e.g. v1.2.3 or v1.3.0-rc.1)", v)
	}
	sv, err := semver.StrictNewVersion(strings.TrimPrefix(v, "v"))
	if err != nil {
		return "", "", fmt.Errorf("VERSION %q: %w", v, err)
	}
	major, minor = fmt.Sprint(sv.Major()), fmt.Sprint(sv.Minor())
	if sv.Prerelease() != "" || sv.Metadata() != "" {
		minor += "+"
	}
	return major, minor, nil
}

// gitStamp reads the commit, whether the tree has changes, and the
// commit's date from git in repo.
func gitStamp(repo, version string) (stamp, error) {
	s := stamp{version: version}
	var err error
	if s.major, s.minor, err = parseVersion(version); err != nil {
		return s, err
	}
	if s.commit, err = git(repo, "rev-parse", "HEAD"); err != nil {
		return s, err
	}
	status, err := git(repo, "status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return s, err
	}
	s.treeState = "clean"
	if status != "" {
		s.treeState = "dirty"
	}
	date, err := git(repo, "log", "-1", "--format=%cI", "HEAD")
	if err != nil {
		return s, err
	}
	if s.date, err = parseCommitDate(date); err != nil {
		return s, err
	}
	return s, nil
}

// parseCommitDate reads git's strict ISO 8601 date (%cI), offset included.
func parseCommitDate(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("git log --format=%%cI gave %q, not an RFC 3339 date: %w", s, err)
	}
	return t.UTC(), nil
}

func git(repo string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", repo}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("git %s in %s: %w: %s", strings.Join(args, " "), repo, err, strings.TrimSpace(string(exit.Stderr)))
		}
		return "", fmt.Errorf("git %s in %s: %w", strings.Join(args, " "), repo, err)
	}
	return strings.TrimSpace(string(out)), nil
}

type artifact struct {
	name string
	size int64
}

func release(o options, log io.Writer) ([]artifact, error) {
	s, err := gitStamp(o.repo, o.version)
	if err != nil {
		return nil, err
	}
	if o.clean {
		if err := os.RemoveAll(o.dist); err != nil {
			return nil, err
		}
	}
	if s.treeState == "dirty" {
		fmt.Fprintf(log, "release: warning: %s has uncommitted changes: the binaries say gitTreeState=dirty, and another checkout of %s builds other bytes\n", o.repo, s.commit)
	}
	if err := emptyDir(o.dist); err != nil {
		return nil, err
	}
	contents, err := packageContents(o.repo)
	if err != nil {
		return nil, err
	}
	bins := map[string]string{}
	for _, arch := range o.arches {
		bin := filepath.Join(o.dist, binaryName(s.version, arch))
		if err := buildBinary(o.repo, arch, s, bin, log); err != nil {
			return nil, err
		}
		bins[arch] = bin
		if o.imageOnly {
			continue
		}
		for _, p := range packagers {
			if _, err := writePackage(p, o.repo, o.dist, bin, arch, s, contents); err != nil {
				return nil, err
			}
		}
	}
	idx, err := writeImages(o.dist, bins, o.arches, s)
	if err != nil {
		return nil, err
	}
	// The digest a DaemonSet pins the image by.
	if digest, err := idx.Digest(); err == nil {
		fmt.Fprintf(log, "release: image %s, index digest %s\n", imageRef(s.version), digest)
	}
	if err := writeSums(o.dist); err != nil {
		return nil, err
	}
	if o.push != "" {
		if err := pushImage(idx, o.push, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return nil, err
		}
		digest, err := idx.Digest()
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "release: pushed %s@%s\n", o.push, digest)
	}
	entries, err := os.ReadDir(o.dist)
	if err != nil {
		return nil, err
	}
	var out []artifact
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			return nil, err
		}
		out = append(out, artifact{name: e.Name(), size: fi.Size()})
	}
	return out, nil
}

// emptyDir creates dir, or accepts it empty: SHA256SUMS covers everything
// in it, so nothing of an earlier release may stay.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return os.MkdirAll(dir, 0o755)
	case err != nil:
		return err
	case len(entries) > 0:
		return fmt.Errorf("%s is not empty (it holds %s): remove it first, SHA256SUMS covers everything in it", dir, entries[0].Name())
	}
	return nil
}

func binaryName(version, arch string) string {
	return fmt.Sprintf("pullguard-%s-linux-%s", version, arch)
}

// buildBinary builds ./cmd/pullguard static (no cgo) for linux/arch. Every
// setting that changes the output is given, not taken from the caller's
// environment (GOFLAGS, GOAMD64, GOARM64, GOEXPERIMENT).
func buildBinary(repo, arch string, s stamp, out string, log io.Writer) error {
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	toolchain, err := goToolchain(filepath.Join(repo, "go.mod"))
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags", s.ldflags(), "-o", abs, "./cmd/pullguard")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch,
		"GOFLAGS=-mod=readonly", "GOAMD64=v1", "GOARM64=v8.0", "GOEXPERIMENT=", "GOTOOLCHAIN="+toolchain)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for linux/%s: %w", arch, err)
	}
	return nil
}

// goToolchain is the Go toolchain go.mod names: its toolchain line, or
// else its go line. The release is built with exactly it (the go command
// fetches it when the machine has another), so the binary does not depend
// on which Go the machine has.
func goToolchain(gomod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	var goLine, toolchain string
	for i, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "go":
			goLine = "go" + f[1]
		case len(f) == 2 && f[0] == "toolchain":
			toolchain = f[1]
		case len(f) > 0 && (f[0] == "go" || f[0] == "toolchain"):
			return "", fmt.Errorf("%s:%d: cannot read %q", gomod, i+1, line)
		}
	}
	switch {
	case toolchain != "":
		return toolchain, nil
	case goLine != "":
		return goLine, nil
	}
	return "", fmt.Errorf("%s: no go line", gomod)
}

// The package's paths. The kubelet drop-in is not placed in
// kubelet.service.d: there it would switch the kubelet at the next
// daemon-reload. `pullguard install` puts it in place.
const (
	binPath     = "/usr/bin/pullguard"
	unitDir     = "/usr/lib/systemd/system"
	shareDir    = "/usr/share/pullguard"
	docDir      = "/usr/share/doc/pullguard"
	maintainer  = "pullguard <dev@pullguard.invalid>"
	homepage    = "https://github.com/pullguard/pullguard"
	summary     = "CRI image proxy that keeps private images from other tenants' pods"
	description = summary + `
 pullguard serve sits between the kubelet and containerd and checks, as the
 kubelet's KEP-2535 "ensure secret pulled images" does, that a pod may use an
 image already on the node with its own pull credentials.`
)

// content is one file of the packages: its source in the repository and
// where it goes.
type content struct {
	src, dst string
	mode     os.FileMode
}

// packageContents lists the repository's files the packages ship: every
// unit in deploy/systemd (*.service, *.socket) under unitDir, the kubelet
// drop-in (*.conf) and config snippet under shareDir, the README. A file
// of another kind in deploy/ is an error: a new deploy file is packaged on
// purpose, or not at all.
func packageContents(repo string) ([]content, error) {
	var out []content
	for _, d := range []string{"deploy/systemd", "deploy/kubelet"} {
		entries, err := os.ReadDir(filepath.Join(repo, d))
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			src := filepath.Join(d, e.Name())
			switch ext := filepath.Ext(e.Name()); {
			case d == "deploy/systemd" && (ext == ".service" || ext == ".socket"):
				if err := checkExecStart(filepath.Join(repo, src)); err != nil {
					return nil, err
				}
				out = append(out, content{src: src, dst: unitDir + "/" + e.Name(), mode: 0o644})
			case d == "deploy/systemd" && ext == ".conf", d == "deploy/kubelet" && ext == ".yaml":
				out = append(out, content{src: src, dst: shareDir + "/" + e.Name(), mode: 0o644})
			default:
				return nil, fmt.Errorf("%s: not packaged: the release packages *.service and *.socket units, *.conf drop-ins from deploy/systemd and *.yaml from deploy/kubelet (tools/release/main.go, packageContents)", src)
			}
		}
	}
	out = append(out, content{src: "README.md", dst: docDir + "/README.md", mode: 0o644})
	slices.SortFunc(out, func(a, b content) int { return strings.Compare(a.dst, b.dst) })
	return out, nil
}

// checkExecStart refuses a unit whose ExecStart runs a pullguard the
// package does not ship.
func checkExecStart(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "ExecStart=")
		if !ok {
			continue
		}
		prog := strings.TrimLeft(strings.Fields(v + " x")[0], "@-:+!")
		if filepath.Base(prog) == "pullguard" && prog != binPath {
			return fmt.Errorf("%s:%d: ExecStart runs %s, but the packages install pullguard as %s", path, line, prog, binPath)
		}
	}
	return sc.Err()
}

// copyright is the packages' copyright file. It names no license: the
// repository states none (a License field here, and the rpm's License tag,
// are to be set when it does).
const copyright = `pullguard
Source: ` + homepage + `
Copyright: the pullguard authors

The pullguard binary is statically linked. The Go modules it is built from,
with their versions, are listed in the source's go.mod and go.sum at the
commit the binary names (pullguard --version=raw, GitCommit).
`

type packager struct {
	format string
	nfpm.Packager
}

var packagers = []packager{{"deb", deb.Default}, {"rpm", rpm.DefaultRPM}}

// packageInfo is the nfpm description of the package for arch. Every time
// in it is the commit's date; the rpm's build host is fixed; there are no
// scripts: installing enables and starts nothing.
func packageInfo(repo, bin, arch string, s stamp, contents []content, copyrightFile string) *nfpm.Info {
	fi := func(mode os.FileMode) *files.ContentFileInfo {
		return &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode, MTime: s.date}
	}
	var cs files.Contents
	cs = append(cs, &files.Content{Source: bin, Destination: binPath, FileInfo: fi(0o755)})
	for _, c := range contents {
		cs = append(cs, &files.Content{Source: filepath.Join(repo, c.src), Destination: c.dst, FileInfo: fi(c.mode)})
	}
	cs = append(cs, &files.Content{Source: copyrightFile, Destination: docDir + "/copyright", FileInfo: fi(0o644)})
	info := &nfpm.Info{
		Name:        "pullguard",
		Arch:        arch,
		Platform:    "linux",
		Version:     s.version,
		Release:     "1",
		Section:     "admin",
		Priority:    "optional",
		Maintainer:  maintainer,
		Description: description,
		Vendor:      "pullguard",
		Homepage:    homepage,
		MTime:       s.date,
		Overridables: nfpm.Overridables{
			Contents: cs,
			Umask:    0o022,
			RPM: nfpm.RPM{
				BuildHost: "pullguard-release",
				Group:     "System Environment/Daemons",
				Summary:   summary,
				Packager:  maintainer,
			},
		},
	}
	return nfpm.WithDefaults(info)
}

// writePackage writes the package of format p for arch into dist and
// returns its name.
func writePackage(p packager, repo, dist, bin, arch string, s stamp, contents []content) (string, error) {
	tmp, err := os.MkdirTemp("", "pullguard-release-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	copyrightFile := filepath.Join(tmp, "copyright")
	if err := os.WriteFile(copyrightFile, []byte(copyright), 0o644); err != nil {
		return "", err
	}
	info := packageInfo(repo, bin, arch, s, contents, copyrightFile)
	name := p.ConventionalFileName(info)
	path := filepath.Join(dist, name)
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := p.Package(info, f); err != nil {
		f.Close()
		return "", fmt.Errorf("%s package for %s: %w", p.format, arch, err)
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return name, nil
}

// writeSums writes SHA256SUMS over every file in dist, sorted by name, in
// sha256sum's format: `sha256sum -c SHA256SUMS` in dist checks them.
func writeSums(dist string) error {
	entries, err := os.ReadDir(dist)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, e := range entries {
		if e.Name() == "SHA256SUMS" || !e.Type().IsRegular() {
			continue
		}
		sum, err := fileSHA256(filepath.Join(dist, e.Name()))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, e.Name())
	}
	return os.WriteFile(filepath.Join(dist, "SHA256SUMS"), []byte(b.String()), 0o644)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

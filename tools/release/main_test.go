package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/blakesmith/ar"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	rpmutils "github.com/sassoftware/go-rpmutils"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repoRoot is the pullguard repository this module sits in.
const repoRoot = "../.."

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		version      string
		major, minor string
		refused      bool
	}{
		{version: "v1.2.3", major: "1", minor: "2"},
		{version: "v0.1.0", major: "0", minor: "1"},
		{version: "v1.3.0-rc.1", major: "1", minor: "3+"},
		{version: "v1.3.0+build.7", major: "1", minor: "3+"},
		{version: "1.2.3", refused: true},
		{version: "v1.2", refused: true},
		{version: "v1", refused: true},
		{version: "v1.2.3.4", refused: true},
		{version: "v01.2.3", refused: true},
		{version: "v1.2.3-", refused: true},
		{version: "V1.2.3", refused: true},
		{version: "vX.Y.Z", refused: true},
		{version: "", refused: true},
		{version: "v1.2.3 ", refused: true},
	} {
		t.Run(tc.version, func(t *testing.T) {
			major, minor, err := parseVersion(tc.version)
			if tc.refused {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "not a semantic version with a leading v")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.major, major)
			assert.Equal(t, tc.minor, minor)
		})
	}
}

// TestRunRefusesABadVersion: make release VERSION=1.2.3 stops before it
// builds or writes anything.
func TestRunRefusesABadVersion(t *testing.T) {
	dist := filepath.Join(t.TempDir(), "dist")
	require.NoError(t, os.Mkdir(dist, 0o755))
	earlier := filepath.Join(dist, "pullguard_1.0.0-1_amd64.deb")
	require.NoError(t, os.WriteFile(earlier, []byte("an earlier release"), 0o644))
	var stdout, stderr bytes.Buffer
	code := run([]string{"-C", repoRoot, "-version", "1.2.3", "-dist", dist, "-clean"}, &stdout, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), `VERSION "1.2.3" is not a semantic version with a leading v`)
	assert.FileExists(t, earlier, "-clean removes nothing before the version is accepted")
}

func TestBuildDateIsTheCommitDateInUTC(t *testing.T) {
	d, err := parseCommitDate("2026-11-27T15:04:05+01:00")
	require.NoError(t, err)
	assert.Equal(t, "2026-11-27T14:04:05Z", stamp{date: d}.buildDate())
	_, err = parseCommitDate("Fri Nov 27 15:04:05 2026")
	assert.ErrorContains(t, err, "not an RFC 3339 date")
}

func TestGoToolchain(t *testing.T) {
	for _, tc := range []struct{ gomod, want, err string }{
		{gomod: "module x\n\ngo 1.26.8\n", want: "go1.26.8"},
		{gomod: "module x\n\ngo 1.26\n\ntoolchain go1.26.9\n", want: "go1.26.9"},
		{gomod: "module x\n", err: "no go line"},
		{gomod: "module x\ngo 1.26 extra\n", err: "go.mod:2: cannot read"},
	} {
		path := filepath.Join(t.TempDir(), "go.mod")
		require.NoError(t, os.WriteFile(path, []byte(tc.gomod), 0o644))
		got, err := goToolchain(path)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.gomod)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tc.want, got)
	}
}

func TestDistMustBeEmpty(t *testing.T) {
	dist := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dist, "old.deb"), nil, 0o644))
	err := emptyDir(dist)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "old.deb")
}

// fakeRepo is a repository's deploy files and README in a temporary
// directory, each file with mode and mtime.
func fakeRepo(t *testing.T, files map[string]string, mode os.FileMode, mtime time.Time) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		path := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(data), mode))
		require.NoError(t, os.Chmod(path, mode))
		require.NoError(t, os.Chtimes(path, mtime, mtime))
	}
	return dir
}

// deployFiles are the repository's files packageContents reads.
func deployFiles(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, glob := range []string{"deploy/systemd/*", "deploy/kubelet/*", "README.md"} {
		matches, err := filepath.Glob(filepath.Join(repoRoot, glob))
		require.NoError(t, err)
		for _, m := range matches {
			data, err := os.ReadFile(m)
			require.NoError(t, err)
			rel, err := filepath.Rel(repoRoot, m)
			require.NoError(t, err)
			out[rel] = string(data)
		}
	}
	return out
}

func TestPackageContentsRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, file, data, want string
	}{
		{name: "a deploy file of unknown kind", file: "deploy/systemd/notes.txt", data: "x", want: "deploy/systemd/notes.txt: not packaged"},
		{name: "a unit running another pullguard", file: "deploy/systemd/pullguard.service", data: "[Service]\n\nExecStart=/usr/local/bin/pullguard serve \\\n  --x\n",
			want: "deploy/systemd/pullguard.service:3: ExecStart runs /usr/local/bin/pullguard, but the packages install pullguard as /usr/bin/pullguard"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := deployFiles(t)
			files[tc.file] = tc.data
			_, err := packageContents(fakeRepo(t, files, 0o644, time.Now()))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// fakeBuild is a v1.2.3 stamp and a file standing in for its binary.
func fakeBuild(t *testing.T) (stamp, string) {
	t.Helper()
	s := stamp{version: "v1.2.3", major: "1", minor: "2", commit: strings.Repeat("a", 40), treeState: "clean",
		date: time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)}
	bin := filepath.Join(t.TempDir(), "pullguard")
	require.NoError(t, os.WriteFile(bin, []byte("\x7fELF not really"), 0o755))
	return s, bin
}

// TestPackagesAreReproducible packages one binary from two checkouts whose
// files have other modes and mtimes, as two clones made at other times
// under other umasks have: the packages are byte-identical.
func TestPackagesAreReproducible(t *testing.T) {
	s, bin := fakeBuild(t)
	files := deployFiles(t)
	repos := []string{
		fakeRepo(t, files, 0o644, time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)),
		fakeRepo(t, files, 0o600, time.Now()),
	}
	var sums [2]map[string]string
	for i, repo := range repos {
		contents, err := packageContents(repo)
		require.NoError(t, err)
		dist := t.TempDir()
		for _, p := range packagers {
			_, err := writePackage(p, repo, dist, bin, "arm64", s, contents)
			require.NoError(t, err)
		}
		require.NoError(t, writeSums(dist))
		sums[i] = readSums(t, dist)
	}
	assert.Len(t, sums[0], 2, "a .deb and an .rpm")
	assert.Equal(t, sums[0], sums[1])
}

// TestEveryUnitIsPackaged: a unit added to deploy/systemd (here a socket
// unit) is in both packages, with nothing else to change.
func TestEveryUnitIsPackaged(t *testing.T) {
	s, bin := fakeBuild(t)
	files := deployFiles(t)
	files["deploy/systemd/pullguard-test.socket"] = "[Socket]\nListenStream=/run/pullguard/pullguard.sock\n"
	repo := fakeRepo(t, files, 0o644, time.Now())
	contents, err := packageContents(repo)
	require.NoError(t, err)
	dist := t.TempDir()
	for _, p := range packagers {
		_, err := writePackage(p, repo, dist, bin, "amd64", s, contents)
		require.NoError(t, err)
	}
	debFiles, _ := readDeb(t, filepath.Join(dist, "pullguard_1.2.3-1_amd64.deb"), s)
	assert.Contains(t, debFiles, unitDir+"/pullguard-test.socket")
	var wantFiles []string
	for _, c := range contents {
		wantFiles = append(wantFiles, c.dst)
	}
	wantFiles = append(wantFiles, binPath, docDir+"/copyright")
	slices.Sort(wantFiles)
	checkRPM(t, filepath.Join(dist, "pullguard-1.2.3-1.x86_64.rpm"), s, wantFiles, []string{unitDir + "/pullguard-test.socket"})
}

// TestReleaseOneArch builds the release for this machine's architecture
// twice, from this checkout, into two directories, and checks what an
// operator gets. The second build compiles nothing: it reuses every
// package the first one compiled from the Go build cache and links again.
// `make release-check` builds both architectures in two fresh clones, the
// second with an empty build cache.
func TestReleaseOneArch(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pullguard: not with -short")
	}
	const version = "v9.8.7-rc.1"
	s, err := gitStamp(repoRoot, version)
	require.NoError(t, err)
	var dists [2]string
	for i := range dists {
		dists[i] = filepath.Join(t.TempDir(), "dist")
		var log bytes.Buffer
		_, err := release(options{repo: repoRoot, version: version, dist: dists[i], arches: []string{runtime.GOARCH}}, &log)
		require.NoError(t, err, log.String())
	}
	after, err := gitStamp(repoRoot, version)
	require.NoError(t, err)
	require.Equal(t, s, after, "the checkout changed while the test built from it")
	assert.Equal(t, readSums(t, dists[0]), readSums(t, dists[1]), "two builds of one commit are byte-identical")
	checkDist(t, repoRoot, dists[0], s, []string{runtime.GOARCH})
	checkBuildInfoMetric(t, filepath.Join(dists[0], binaryName(version, runtime.GOARCH)), s)
}

// TestReleaseCheck (make release-check): `make release` in two fresh
// clones of HEAD, the second with an empty Go build cache (GOCACHE) and at
// another path; every artifact of both architectures is byte-identical.
// The module cache (GOMODCACHE) is shared: it holds sources, checked
// against go.sum, not build output.
func TestReleaseCheck(t *testing.T) {
	if os.Getenv("PULLGUARD_RELEASE_CHECK") == "" {
		t.Skip("PULLGUARD_RELEASE_CHECK unset: run `make release-check`")
	}
	const version = "v0.0.0-check.1"
	head, err := git(repoRoot, "rev-parse", "HEAD")
	require.NoError(t, err)
	var dists [2]string
	for i, gocache := range []string{"", t.TempDir()} {
		clone := filepath.Join(t.TempDir(), []string{"a", "elsewhere/b"}[i])
		out, err := exec.Command("git", "clone", "--quiet", "--no-local", repoRoot, clone).CombinedOutput()
		require.NoError(t, err, string(out))
		out, err = exec.Command("git", "-C", clone, "checkout", "--quiet", head).CombinedOutput()
		require.NoError(t, err, string(out))
		cmd := exec.Command("make", "--no-print-directory", "release", "VERSION="+version)
		cmd.Dir = clone
		cmd.Env = os.Environ()
		if gocache != "" {
			cmd.Env = append(cmd.Env, "GOCACHE="+gocache)
		}
		start := time.Now()
		out, err = cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		t.Logf("make release in %s (GOCACHE %q) took %s:\n%s", clone, gocache, time.Since(start).Round(time.Second), out)
		dists[i] = filepath.Join(clone, "dist")
	}
	assert.Equal(t, readSums(t, dists[0]), readSums(t, dists[1]), "two builds of one commit are byte-identical")
	assert.Contains(t, readSums(t, dists[0]), ociArchiveName(version))
	s, err := gitStamp(repoRoot, version)
	require.NoError(t, err)
	s.treeState = "clean"
	checkDist(t, repoRoot, dists[0], s, []string{"amd64", "arm64"})
}

// readSums reads dist/SHA256SUMS, after `sha256sum -c` accepted it.
func readSums(t *testing.T, dist string) map[string]string {
	t.Helper()
	if _, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
		cmd.Dir = dist
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "sha256sum -c SHA256SUMS: %s", out)
	} else {
		t.Log("sha256sum is missing: SHA256SUMS is read but not checked with it")
	}
	f, err := os.Open(filepath.Join(dist, "SHA256SUMS"))
	require.NoError(t, err)
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	line := regexp.MustCompile(`^([0-9a-f]{64})  (\S+)$`)
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		require.NotNil(t, m, "a line of SHA256SUMS: %q", sc.Text())
		sums[m[2]] = m[1]
	}
	require.NoError(t, sc.Err())
	entries, err := os.ReadDir(dist)
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() != "SHA256SUMS" {
			assert.Contains(t, sums, e.Name(), "SHA256SUMS covers every file in dist")
		}
	}
	return sums
}

// checkDist checks a release directory: the binaries are static and say
// their version; the packages hold the binary, the units and the kubelet
// files with the release's version, times from the commit and no scripts.
func checkDist(t *testing.T, repo, dist string, s stamp, arches []string) {
	t.Helper()
	sums := readSums(t, dist)
	contents, err := packageContents(repo)
	require.NoError(t, err)
	wantFiles := []string{binPath, docDir + "/copyright"}
	for _, c := range contents {
		wantFiles = append(wantFiles, c.dst)
	}
	slices.Sort(wantFiles)
	// The units the deploy directory has, by name: the socket unit is
	// packaged once deploy/systemd/pullguard.socket exists.
	units := []string{unitDir + "/pullguard.service"}
	if _, err := os.Stat(filepath.Join(repo, "deploy/systemd/pullguard.socket")); err == nil {
		units = append(units, unitDir+"/pullguard.socket")
	}
	for _, arch := range arches {
		bin := filepath.Join(dist, binaryName(s.version, arch))
		t.Run("binary "+arch, func(t *testing.T) { checkStatic(t, bin, arch) })
		if arch == runtime.GOARCH {
			t.Run("version "+arch, func(t *testing.T) { checkVersion(t, bin, s) })
		}
		debName, rpmName := "", ""
		for name := range sums {
			switch {
			case strings.HasSuffix(name, "_"+arch+".deb"):
				debName = name
			case strings.HasSuffix(name, "."+map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[arch]+".rpm"):
				rpmName = name
			}
		}
		t.Run("deb "+arch, func(t *testing.T) {
			require.NotEmpty(t, debName, "a .deb for %s in %v", arch, sums)
			files, control := readDeb(t, filepath.Join(dist, debName), s)
			assert.Equal(t, wantFiles, regularFiles(files))
			assert.Subset(t, regularFiles(files), units)
			assert.Equal(t, os.FileMode(0o755), files[binPath].mode)
			assert.Equal(t, sums[binaryName(s.version, arch)], files[binPath].sha256, "the .deb holds the release's binary")
			assert.Equal(t, debVersion(s.version), control["Version"])
			assert.Equal(t, arch, control["Architecture"])
			assert.Equal(t, "pullguard", control["Package"])
			if _, err := exec.LookPath("dpkg-deb"); err == nil {
				out, err := exec.Command("dpkg-deb", "--field", filepath.Join(dist, debName), "Version").Output()
				require.NoError(t, err)
				assert.Equal(t, debVersion(s.version), strings.TrimSpace(string(out)), "dpkg-deb reads the same version")
			}
		})
		t.Run("rpm "+arch, func(t *testing.T) {
			require.NotEmpty(t, rpmName, "an .rpm for %s in %v", arch, sums)
			checkRPM(t, filepath.Join(dist, rpmName), s, wantFiles, units)
		})
		t.Run("image "+arch, func(t *testing.T) {
			require.Contains(t, sums, dockerArchiveName(s.version, arch))
			tag, err := name.NewTag(imageRef(s.version))
			require.NoError(t, err)
			img, err := tarball.ImageFromPath(filepath.Join(dist, dockerArchiveName(s.version, arch)), &tag)
			require.NoError(t, err)
			data, err := os.ReadFile(bin)
			require.NoError(t, err)
			checkImage(t, img, arch, s, data)
			layers, err := img.Layers()
			require.NoError(t, err)
			size, err := layers[0].Size()
			require.NoError(t, err)
			t.Logf("linux/%s image: %d bytes compressed (its binary %d)", arch, size, len(data))
		})
	}
}

// debVersion is the Debian version nfpm gives vX.Y.Z-pre: X.Y.Z~pre-1 (a
// prerelease sorts before its release).
func debVersion(v string) string {
	v = strings.TrimPrefix(v, "v")
	v = strings.Replace(v, "-", "~", 1)
	return v + "-1"
}

// checkStatic: no program interpreter, no shared library needed.
func checkStatic(t *testing.T, path, arch string) {
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	assert.Equal(t, map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch], f.Machine)
	for _, p := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "%s asks for a program interpreter", path)
		assert.NotEqual(t, elf.PT_DYNAMIC, p.Type, "%s is dynamically linked", path)
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	assert.Empty(t, libs, "DT_NEEDED of %s", path)
}

// checkVersion runs the binary: --version is the release's version,
// --version=raw has the commit, its date and the tree state.
func checkVersion(t *testing.T, bin string, s stamp) {
	out, err := exec.Command(bin, "--version").Output()
	require.NoError(t, err)
	assert.Equal(t, "pullguard "+s.version+"\n", string(out))
	out, err = exec.Command(bin, "--version=raw").Output()
	require.NoError(t, err)
	for _, field := range []string{
		`Major:"` + s.major + `"`, `Minor:"` + s.minor + `"`, `GitVersion:"` + s.version + `"`,
		`GitCommit:"` + s.commit + `"`, `GitTreeState:"` + s.treeState + `"`, `BuildDate:"` + s.buildDate() + `"`,
		`Platform:"linux/` + runtime.GOARCH + `"`,
	} {
		assert.Contains(t, string(out), field)
	}
}

// checkBuildInfoMetric starts the release binary's serve on the embedded
// runtime and reads pullguard_build_info from its /metrics.
func checkBuildInfoMetric(t *testing.T, bin string, s stamp) {
	dir, err := os.MkdirTemp("", "pgrel")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	cmd := exec.Command(bin, "serve", "--listen", "unix://"+filepath.Join(dir, "pg.sock"), "--root-dir", filepath.Join(dir, "root"),
		"--image-service-endpoint", "embedded", "--metrics-bind-address", "127.0.0.1:0", "--kubelet-root-dir", filepath.Join(dir, "no-kubelet"), "-v=2")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := regexp.MustCompile(`"Serving /metrics and /healthz".*address="([^"]+)"`)
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var metricsAddr string
	deadline := time.After(60 * time.Second)
	for metricsAddr == "" {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "serve exited before it served /metrics")
			if m := addr.FindStringSubmatch(line); m != nil {
				metricsAddr = m[1]
			}
		case <-deadline:
			t.Fatal("serve did not serve /metrics within a minute")
		}
	}
	go func() {
		for range lines {
		}
	}()
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	line := regexp.MustCompile(`(?m)^pullguard_build_info\{.*$`).FindString(string(body))
	want := `pullguard_build_info{build_date="` + s.buildDate() + `",compiler="gc",git_commit="` + s.commit + `",git_tree_state="` + s.treeState +
		`",git_version="` + s.version + `",go_version="` + runtime.Version() + `",major="` + s.major + `",minor="` + s.minor + `",platform="linux/` + runtime.GOARCH + `"} 1`
	assert.Equal(t, want, line)
}

type entry struct {
	mode   os.FileMode
	mtime  time.Time
	sha256 string
	dir    bool
}

func regularFiles(files map[string]entry) []string {
	var out []string
	for name, e := range files {
		if !e.dir {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// readDeb reads a .deb with an ar reader and archive/tar: the data
// archive's files (each with the commit's mtime, owned by root) and the
// control file's fields. The control archive has no maintainer script.
func readDeb(t *testing.T, path string, s stamp) (map[string]entry, map[string]string) {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	files := map[string]entry{}
	control := map[string]string{}
	var members []string
	r := ar.NewReader(f)
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		members = append(members, h.Name)
		assert.Equal(t, s.date.Unix(), h.ModTime.Unix(), "ar member %s", h.Name)
		switch h.Name {
		case "control.tar.gz":
			forTar(t, r, func(h *tar.Header, data []byte) {
				name := strings.TrimPrefix(h.Name, "./")
				assert.NotContains(t, []string{"preinst", "postinst", "prerm", "postrm", "config", "triggers"}, name, "a maintainer script")
				if name == "control" {
					for _, line := range strings.Split(string(data), "\n") {
						if k, v, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(line, " ") {
							control[k] = v
						}
					}
				}
			})
		case "data.tar.gz":
			forTar(t, r, func(h *tar.Header, data []byte) {
				name := "/" + strings.TrimPrefix(h.Name, "./")
				name = strings.TrimSuffix(name, "/")
				assert.Equal(t, s.date.Unix(), h.ModTime.Unix(), "mtime of %s", name)
				assert.Equal(t, "root", h.Uname, name)
				assert.False(t, strings.HasPrefix(name, "/etc"), "the package writes nothing in /etc: %s", name)
				assert.NotContains(t, name, "kubelet.service.d", "installing the package must not switch the kubelet")
				files[name] = entry{mode: h.FileInfo().Mode().Perm(), mtime: h.ModTime, sha256: sha(data), dir: h.Typeflag == tar.TypeDir}
			})
		}
	}
	assert.Equal(t, []string{"debian-binary", "control.tar.gz", "data.tar.gz"}, members)
	return files, control
}

func forTar(t *testing.T, r io.Reader, fn func(*tar.Header, []byte)) {
	t.Helper()
	gz, err := gzip.NewReader(r)
	require.NoError(t, err)
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		require.NoError(t, err)
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		fn(h, data)
	}
}

// rpm's %pretrans and %posttrans script tags, which go-rpmutils does not
// name.
const rpmPretrans, rpmPosttrans = 1151, 1152

// checkRPM reads the .rpm with go-rpmutils: its version, build time and
// host, no scripts, and its files.
func checkRPM(t *testing.T, path string, s stamp, wantFiles, units []string) {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r, err := rpmutils.ReadRpm(f)
	require.NoError(t, err)
	nevra, err := r.Header.GetNEVRA()
	require.NoError(t, err)
	assert.Equal(t, "pullguard", nevra.Name)
	assert.Equal(t, strings.Replace(strings.TrimPrefix(s.version, "v"), "-", "~", 1), nevra.Version)
	assert.Equal(t, "1", nevra.Release)
	buildTime, err := r.Header.GetInts(rpmutils.BUILDTIME)
	require.NoError(t, err)
	assert.Equal(t, []int{int(s.date.Unix())}, buildTime, "the build time is the commit's")
	host, err := r.Header.GetString(rpmutils.BUILDHOST)
	require.NoError(t, err)
	assert.Equal(t, "pullguard-release", host)
	for _, tag := range []int{rpmutils.PREIN, rpmutils.POSTIN, rpmutils.PREUN, rpmutils.POSTUN, rpmPretrans, rpmPosttrans, rpmutils.TRIGGERSCRIPTS} {
		assert.False(t, r.Header.HasTag(tag), "the rpm has a script (tag %d)", tag)
	}
	infos, err := r.Header.GetFiles()
	require.NoError(t, err)
	var names []string
	for _, fi := range infos {
		assert.Equal(t, int(s.date.Unix()), fi.Mtime(), "mtime of %s", fi.Name())
		assert.Equal(t, "root", fi.UserName(), fi.Name())
		if fi.Mode()&0o170000 == 0o100000 {
			names = append(names, fi.Name())
		}
		if fi.Name() == binPath {
			assert.Equal(t, 0o755, fi.Mode()&0o7777)
		}
	}
	slices.Sort(names)
	assert.Equal(t, wantFiles, names)
	assert.Subset(t, names, units)
}

func sha(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

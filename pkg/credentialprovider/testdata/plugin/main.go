// Command plugin is a credential provider plugin for the tests of package
// credentialprovider. The tests build it into a temporary directory; its
// behaviour is chosen by flags (the provider's args):
//
//	-mode good       answer with credentials derived from the image
//	-mode slow       like good, after -delay
//	-mode hang       start a grandchild (its pid in -pidfile, the plugin's own
//	                 in -plugin-pidfile, written first), then never answer
//	-mode crash      write to stderr and exit 3
//	-mode sigkill    write to stderr and kill itself with SIGKILL
//	-mode garbage    print text that is not JSON
//	-mode huge       print more than any test's stdout limit
//	-mode hugeerr    print more than any test's stderr limit to stderr
//	-mode echo-sa    answer with "exchanged:" and the service account token as
//	                 the password and the annotations as the username
//	-mode token-as-password  answer with the pod's service account token itself
//	                 as the password (which the kubelet refuses)
//	-mode env-names  answer with "env:" and the NAMES, never the values, of
//	                 the variables listed in -env-names that its environment
//	                 holds, in the environment's order, as the username
//	-mode fail-once  exit 1 on the first run (per -record file), then like good
//	-mode account    answer with the registry account in -account FILE
//	                 ("username:password" on its first line): a node's
//	                 credential for a real registry
//	-mode mint       mint a token per call, as ECR's plugin does: answer the
//	                 username in -account FILE (its first line, before any
//	                 ':') with a new random password each run, appended as
//	                 "username:password" to the -minted FILE before the
//	                 answer (a test registry accepts what that file holds)
//	-mode tattle     like good, after writing to stderr the token, the value of
//	                 TESTPLUGIN_SECRET and the password it answers, plain,
//	                 base64 (alone and in user:password), JSON- and URL-escaped
//
// -extra FIELDS adds raw JSON members (`"future":true`) at the end of the
// answer's object: fields the kubelet does not know, has twice or in
// another case.
//
// -leave setsid starts, before the mode's behaviour, a grandchild in a new
// session (out of the plugin's process group) that sleeps forever; -leave
// daemon double-forks one (an intermediate in a new session starts it in
// another new session and exits). Its pid goes to -leave-pidfile.
//
// -gate FILE holds a run, after it is recorded, until FILE holds a number
// at least the run's number (its line in the -record file): a test opens
// the gate once every look-up it wants coalesced has joined the run.
//
// The environment variable TESTPLUGIN_PREFIX, when set, prefixes every
// username. -record FILE appends one line per run ("<image> token=<yes|no>"), so the
// tests can count runs. -key-type, -duration, -auth-keys, -api-version and
// -kind shape the response; in -auth-keys, "{image}" and "{registry}" are
// replaced by the request's image and its registry.
package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pullguard/pullguard/internal/durable"
)

type request struct {
	APIVersion                string            `json:"apiVersion"`
	Kind                      string            `json:"kind"`
	Image                     string            `json:"image"`
	ServiceAccountToken       string            `json:"serviceAccountToken"`
	ServiceAccountAnnotations map[string]string `json:"serviceAccountAnnotations"`
}

type authConfig struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

type response struct {
	APIVersion    string                `json:"apiVersion"`
	Kind          string                `json:"kind"`
	CacheKeyType  string                `json:"cacheKeyType"`
	CacheDuration *string               `json:"cacheDuration,omitempty"`
	Auth          map[string]authConfig `json:"auth"`
}

func main() {
	mode := flag.String("mode", "good", "behaviour")
	record := flag.String("record", "", "file to append one line per run to")
	keyType := flag.String("key-type", "Image", "cacheKeyType of the response")
	duration := flag.String("duration", "", "cacheDuration of the response (empty: unset)")
	authKeys := flag.String("auth-keys", "{image}", "comma-separated auth keys")
	apiVersion := flag.String("api-version", "", "apiVersion of the response (default: the request's)")
	kind := flag.String("kind", "CredentialProviderResponse", "kind of the response")
	delay := flag.Duration("delay", 0, "delay before answering")
	pidfile := flag.String("pidfile", "", "where -mode hang writes its grandchild's pid")
	pluginPidfile := flag.String("plugin-pidfile", "", "where -mode hang writes its own pid")
	leave := flag.String("leave", "", "setsid or daemon: leave a process behind")
	leavePidfile := flag.String("leave-pidfile", "", "where -leave writes the pid of the process left behind")
	envNames := flag.String("env-names", "", "comma-separated variable names -mode env-names reports")
	gate := flag.String("gate", "", "file whose number must reach the run's before it answers")
	account := flag.String("account", "", "file with username:password, for -mode account (and the username for -mode mint)")
	minted := flag.String("minted", "", "file -mode mint appends each minted username:password to")
	extra := flag.String("extra", "", "raw JSON members added at the end of the answer's object")
	flag.Parse()

	switch *mode {
	case "grandchild":
		sleepForever()
	case "daemonize":
		startInNewSession(*leavePidfile)
		return
	}

	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("read stdin: %v", err)
	}
	var req request
	if err := json.Unmarshal(data, &req); err != nil {
		fail("decode request: %v", err)
	}
	switch *leave {
	case "setsid":
		startInNewSession(*leavePidfile)
	case "daemon":
		self, err := os.Executable()
		if err != nil {
			fail("executable: %v", err)
		}
		mid := exec.Command(self, "-mode", "daemonize", "-leave-pidfile", *leavePidfile)
		mid.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := mid.Run(); err != nil {
			fail("daemonize: %v", err)
		}
	}
	runs := 0
	if *record != "" {
		runs = appendRecord(*record, req)
	}
	if *gate != "" {
		waitForGate(*gate, runs)
	}

	switch *mode {
	case "hang":
		self, err := os.Executable()
		if err != nil {
			fail("executable: %v", err)
		}
		child := exec.Command(self, "-mode", "grandchild")
		child.Stdout, child.Stderr = os.Stdout, os.Stderr
		if err := child.Start(); err != nil {
			fail("start grandchild: %v", err)
		}
		if *pluginPidfile != "" {
			writePid(*pluginPidfile, os.Getpid())
		}
		if *pidfile != "" {
			writePid(*pidfile, child.Process.Pid)
		}
		sleepForever()
	case "crash":
		fmt.Fprintln(os.Stderr, "plugin: simulated crash")
		os.Exit(3)
	case "sigkill":
		fmt.Fprintln(os.Stderr, "plugin: killing itself")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		sleepForever()
	case "fake-start-failure":
		// Pose as the reaper's own start failure, with a secret as its cause.
		fmt.Fprintln(os.Stderr, "pullguard-plugin-reaper: cannot start: "+os.Getenv("TESTPLUGIN_SECRET"))
		os.Exit(126)
	case "garbage":
		fmt.Print("{\"apiVersion\": this is not json")
		return
	case "huge":
		chunk := strings.Repeat("x", 64<<10)
		for i := 0; i < 64; i++ {
			fmt.Print(chunk)
		}
		return
	case "hugeerr":
		chunk := strings.Repeat("e", 64<<10)
		for i := 0; i < 64; i++ {
			fmt.Fprint(os.Stderr, chunk)
		}
		return
	case "fail-once":
		if runs <= 1 {
			fmt.Fprintln(os.Stderr, "plugin: first run fails")
			os.Exit(1)
		}
	case "slow":
		time.Sleep(*delay)
	case "tattle":
		for _, v := range []string{req.ServiceAccountToken, os.Getenv("TESTPLUGIN_SECRET"), "pass:" + req.Image} {
			j, _ := json.Marshal(v)
			fmt.Fprintf(os.Stderr, "debug: %s b64=%s basic=%s json=%s url=%s\n", v, base64.StdEncoding.EncodeToString([]byte(v)),
				base64.StdEncoding.EncodeToString([]byte("user:"+v)), j, url.QueryEscape(v))
		}
	}

	resp := response{
		APIVersion:   req.APIVersion,
		Kind:         *kind,
		CacheKeyType: *keyType,
		Auth:         map[string]authConfig{},
	}
	if *apiVersion != "" {
		resp.APIVersion = *apiVersion
	}
	if *duration != "" {
		resp.CacheDuration = duration
	}
	registry, _, _ := strings.Cut(req.Image, "/")
	for _, k := range strings.Split(*authKeys, ",") {
		if k == "" {
			continue
		}
		key := strings.NewReplacer("{image}", req.Image, "{registry}", registry).Replace(k)
		a := authConfig{Username: os.Getenv("TESTPLUGIN_PREFIX") + "user:" + key, Password: "pass:" + req.Image}
		switch *mode {
		case "echo-sa":
			a = authConfig{Username: annotations(req.ServiceAccountAnnotations)}
			if req.ServiceAccountToken != "" {
				a.Password = "exchanged:" + req.ServiceAccountToken
			}
		case "token-as-password":
			a = authConfig{Username: "user", Password: req.ServiceAccountToken}
		case "env-names":
			a.Username = os.Getenv("TESTPLUGIN_PREFIX") + "env:" + presentNames(strings.Split(*envNames, ","))
		case "mint":
			a = mint(*account, *minted)
		case "account":
			data, err := os.ReadFile(*account)
			if err != nil {
				fail("account: %v", err)
			}
			line, _, _ := strings.Cut(string(data), "\n")
			user, pass, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok {
				fail("account: %s holds no username:password", *account)
			}
			a = authConfig{Username: user, Password: pass}
		}
		resp.Auth[key] = a
	}
	out, err := json.Marshal(resp)
	if err != nil {
		fail("encode: %v", err)
	}
	if *extra != "" {
		out = append(append(out[:len(out)-1], ","+*extra...), '}')
	}
	if _, err := os.Stdout.Write(append(out, '\n')); err != nil {
		fail("write: %v", err)
	}
}

// mint returns the username of the account file with a new random
// password, appended to the minted file first (one line, one write).
func mint(account, minted string) authConfig {
	data, err := os.ReadFile(account)
	if err != nil {
		fail("account: %v", err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	user, _, _ := strings.Cut(strings.TrimSpace(line), ":")
	if user == "" || minted == "" {
		fail("mint: needs -account with a username and -minted")
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		fail("mint: %v", err)
	}
	pass := "minted-" + hex.EncodeToString(b[:])
	f, err := os.OpenFile(minted, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		fail("minted: %v", err)
	}
	if _, err := f.WriteString(user + ":" + pass + "\n"); err != nil {
		fail("minted: %v", err)
	}
	if err := f.Close(); err != nil {
		fail("minted: %v", err)
	}
	return authConfig{Username: user, Password: pass}
}

// startInNewSession starts a grandchild in a new session, with no pipe of
// the plugin's, and writes its pid to pidfile.
func startInNewSession(pidfile string) {
	self, err := os.Executable()
	if err != nil {
		fail("executable: %v", err)
	}
	child := exec.Command(self, "-mode", "grandchild")
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := child.Start(); err != nil {
		fail("start grandchild: %v", err)
	}
	writePid(pidfile, child.Process.Pid)
}

// writePid writes pid to path atomically, so a reader never sees it empty.
func writePid(path string, pid int) {
	if err := durable.WriteFile(path, []byte(fmt.Sprint(pid)), 0o600, durable.NoSync()); err != nil {
		fail("pidfile: %v", err)
	}
}

// presentNames lists, in the environment's order and comma-separated, the
// names among wanted that the environment holds (each as often as it
// appears there). Values are never written.
func presentNames(wanted []string) string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		for _, w := range wanted {
			if name == w {
				out = append(out, name)
				break
			}
		}
	}
	return strings.Join(out, ",")
}

// waitForGate returns once the file at path holds a number of at least n.
func waitForGate(path string, n int) {
	for {
		data, err := os.ReadFile(path)
		if err == nil {
			if open, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && open >= n {
				return
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// sleepForever blocks in a way the runtime's deadlock detector accepts.
func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}

func annotations(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ";")
}

// appendRecord appends one line for this run and returns how many runs the
// file now records.
func appendRecord(path string, req request) int {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		fail("record: %v", err)
	}
	token := "no"
	if req.ServiceAccountToken != "" {
		token = "yes"
	}
	if _, err := fmt.Fprintf(f, "%s token=%s\n", req.Image, token); err != nil {
		fail("record: %v", err)
	}
	_ = f.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		fail("record: %v", err)
	}
	return strings.Count(string(data), "\n")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "plugin: "+format+"\n", args...)
	os.Exit(2)
}

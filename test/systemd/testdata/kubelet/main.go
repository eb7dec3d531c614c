// Command kubelet stands in for the kubelet in the real-systemd suite: it
// is installed as /usr/bin/kubelet and started by a kubeadm-style
// kubelet.service, and does what of the kubelet matters to pullguard's
// install: it reads its configuration as the kubelet does (--config, then
// the --config-dir drop-ins, then its flags), checks its image service
// once at start with ImageFsInfo and exits 1 when that fails (as the
// kubelet v1.36 does), then calls ImageFsInfo every second, logging which
// endpoint answered:
//
//	pid=123 check=1 ok endpoint=unix:///run/pullguard/pullguard.sock
//
// `kubelet --version` prints "Kubernetes v1.36.3". Flags it does not read
// are accepted and ignored.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/nodeconfig"
	"github.com/pullguard/pullguard/test/systemd/testdata/criclient"
)

// version is what `kubelet --version` prints.
const version = "Kubernetes v1.36.3"

func main() {
	flags := parseFlags(os.Args[1:])
	if _, ok := flags["version"]; ok {
		fmt.Println(version)
		return
	}
	endpoint, err := imageEndpoint(flags)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubelet:", err)
		os.Exit(1)
	}
	pid := os.Getpid()
	// The kubelet's start-up check: its image service must answer.
	if err := check(endpoint); err != nil {
		fmt.Printf("pid=%d check=1 failed endpoint=%s: %v\n", pid, endpoint, err)
		os.Exit(1)
	}
	fmt.Printf("pid=%d check=1 ok endpoint=%s\n", pid, endpoint)
	for n := 2; ; n++ {
		time.Sleep(time.Second)
		if err := check(endpoint); err != nil {
			fmt.Printf("pid=%d check=%d failed endpoint=%s: %v\n", pid, n, endpoint, err)
			continue
		}
		fmt.Printf("pid=%d check=%d ok endpoint=%s\n", pid, n, endpoint)
	}
}

// parseFlags reads --name=value and --name value; a flag with no value
// (--version) maps to "".
func parseFlags(args []string) map[string]string {
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok && i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			value = args[i+1]
			i++
		}
		flags[name] = value
	}
	return flags
}

// imageEndpoint is the kubelet's image service: imageServiceEndpoint,
// else its runtime's endpoint; a flag overrides its configuration.
func imageEndpoint(flags map[string]string) (string, error) {
	cfg, err := nodeconfig.LoadKubeletConfigDir(flags["config"], flags["config-dir"], false)
	if err != nil {
		return "", err
	}
	image, runtime := cfg.ImageServiceEndpoint, cfg.ContainerRuntimeEndpoint
	if v := flags["image-service-endpoint"]; v != "" {
		image = v
	}
	if v := flags["container-runtime-endpoint"]; v != "" {
		runtime = v
	}
	if image != "" {
		return image, nil
	}
	if runtime == "" {
		return "", fmt.Errorf("no containerRuntimeEndpoint in %v and no --container-runtime-endpoint", cfg.Files)
	}
	return runtime, nil
}

// check calls ImageFsInfo with the kubelet's 5 s deadline.
func check(endpoint string) error {
	path, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok {
		return fmt.Errorf("endpoint %q is not unix://", endpoint)
	}
	conn, err := criclient.Dial(path)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = runtimeapi.NewImageServiceClient(conn).ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	return err
}

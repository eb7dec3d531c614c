package nodeinstall

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
)

// KubeletStillAsksServe says where a file the kubelet reads names serve's
// socket once u is carried out ("" when none). A node whose own
// configuration asks serve, such as one a bootstrap recipe set up (a
// kubeadm patch, an EKS NodeConfig), keeps asking it after uninstall: the
// kubelet restarted with serve stopped would have no image service and
// exit at each start. Uninstall is then refused until that setting is
// removed where it is. The files are the kubelet's unit and drop-ins, its
// environment files, its --config and the drop-ins of its --config-dir,
// each as u leaves it; a line that is a comment does not count.
func (u *UninstallPlan) KubeletStillAsksServe(o Options) (string, error) {
	k, err := Discover(o.Root)
	if err != nil {
		return "", err
	}
	sock := strings.TrimPrefix(listenStream(o.Root), "unix://")
	if sock == "" {
		return "", nil
	}
	files := append([]string{k.Unit}, k.DropIns...)
	files = append(files, k.EnvFiles...)
	if c := k.Flag(FlagConfig); c != "" {
		files = append(files, c)
	}
	if d := k.Flag(FlagConfigDir); d != "" {
		drop, err := dropInFiles(o.Root, d)
		if err != nil {
			return "", err
		}
		files = append(files, drop...)
	}
	for _, f := range files {
		data, err := u.after(o.Root, f)
		if err != nil {
			return "", err
		}
		if line := lineNaming(data, sock); line > 0 {
			return fmt.Sprintf("%s:%d", f, line), nil
		}
	}
	return "", nil
}

// after is the file at p once u is carried out: nil when u removes it or
// it does not exist.
func (u *UninstallPlan) after(root, p string) ([]byte, error) {
	if i := slices.IndexFunc(u.Changes, func(c Change) bool { return c.Path == p }); i >= 0 {
		switch c := u.Changes[i]; c.Action {
		case Remove:
			return nil, nil
		case Restore:
			return c.Data, nil
		default:
			return c.Old, nil
		}
	}
	data, err := os.ReadFile(hostPath(root, p))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	return data, nil
}

// lineNaming is the first line of data, not a comment, that holds s; 0
// for none.
func lineNaming(data []byte, s string) int {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, len(data)+1)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		if strings.Contains(line, s) {
			return n
		}
	}
	return 0
}

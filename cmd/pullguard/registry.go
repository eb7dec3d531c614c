package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/pullguard/pullguard/pkg/podworkers"
	"github.com/pullguard/pullguard/pkg/registry"
)

// accessFile is the file of `pullguard registry --access`: who may read
// which repositories.
type accessFile struct {
	Users        []accessUser `json:"users"`
	Repositories []accessRepo `json:"repositories"`
}

type accessUser struct {
	Name string `json:"name"`
	// Password or PasswordHash (bcrypt, as `htpasswd -B` writes it).
	Password     string `json:"password,omitempty"`
	PasswordHash string `json:"passwordHash,omitempty"`
}

type accessRepo struct {
	// Name: "team-a/app", "team-a/*" (every repository below team-a/) or "*".
	Name     string   `json:"name"`
	Public   bool     `json:"public,omitempty"`
	AllUsers bool     `json:"allUsers,omitempty"`
	Readers  []string `json:"readers,omitempty"`
	Writers  []string `json:"writers,omitempty"`
}

// loadAccess reads an access file strictly: an unknown field is an error
// (a misspelt "readers" must not leave a repository open or closed by
// surprise). Errors name the file, never a password.
func loadAccess(path string) (registry.Config, error) {
	data, err := podworkers.ReadFileLimited(path, 1<<20)
	if err != nil {
		return registry.Config{}, err
	}
	var f accessFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return registry.Config{}, fmt.Errorf("invalid access file %s: %s", path, redactYAMLError(err))
	}
	var cfg registry.Config
	for _, u := range f.Users {
		cfg.Users = append(cfg.Users, registry.User{Name: u.Name, Password: u.Password, PasswordHash: u.PasswordHash})
	}
	for _, r := range f.Repositories {
		cfg.Repositories = append(cfg.Repositories, registry.Repository{Name: r.Name, Public: r.Public, AllUsers: r.AllUsers, Readers: r.Readers, Writers: r.Writers})
	}
	if len(cfg.Repositories) == 0 {
		return registry.Config{}, fmt.Errorf("invalid access file %s: no repositories", path)
	}
	return cfg, nil
}

var (
	yamlLine     = regexp.MustCompile(`line (\d+)`)
	unknownField = regexp.MustCompile(`unknown field "([A-Za-z]{1,32})"`)
)

// redactYAMLError says what is wrong with an access file without quoting
// it: YAML errors can quote the file's text (an anchor, a value), and the
// file holds passwords. It keeps the line number and the name of an
// unknown field when the name is a plain word.
func redactYAMLError(err error) string {
	msg := err.Error()
	if m := unknownField.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("unknown field %q (known: users, repositories; name, password, passwordHash; public, allUsers, readers, writers)", m[1])
	}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		return "not valid YAML at line " + m[1]
	}
	return "not valid YAML, or a field of the wrong type"
}

func newRegistryCommand() *cobra.Command {
	var access, addr string
	var images []string
	cmd := &cobra.Command{
		Use:   "registry --access FILE",
		Short: "Serve a registry on 127.0.0.1 with per-repository access rules, to try pullguard on your own pods",
		Long: `registry serves pullguard's embedded OCI registry (the one 'pullguard demo' and
the tests use) on a loopback address, with Basic authentication and the
per-repository access rules of an access file:

  users:
  - {name: alice, password: alice-secret}
  - {name: bob, password: bob-secret}       # or passwordHash: (htpasswd -B)
  repositories:
  - {name: team-a/*, readers: [alice], writers: [alice]}
  - {name: public/*, public: true}

Rules: an exact repository name wins, then the longest "prefix/*", then "*";
a repository no rule names is closed. --image pushes a generated image (a few
random layers) so that there is something to pull at once; with 'writers',
docker push or crane push work too. Content lives in memory and is gone when
the registry stops (SIGINT or SIGTERM, exit 0).`,
		Example: `  pullguard registry --access access.yaml --addr 127.0.0.1:5000 --image team-a/app:v1 --image public/tool:1`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadAccess(access)
			if err != nil {
				return err
			}
			reg, err := registry.New(cfg, registry.WithAddr(addr), registry.WithLogger(klog.Background().WithName("registry")))
			if err != nil {
				return fmt.Errorf("failed to start the registry (access file %s): %w", access, err)
			}
			defer reg.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			for _, img := range images {
				if err := pushGenerated(ctx, out, reg, img); err != nil {
					return err
				}
			}
			fmt.Fprintf(out, "Serving the registry on %s with the rules of %s; stop it with Ctrl-C.\n", reg.Addr(), access)
			<-ctx.Done()
			fmt.Fprintln(out, "Stopped.")
			return nil
		},
	}
	cmd.Flags().StringVar(&access, "access", "", "the access file: users, passwords and the repositories each may read")
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:5000", "listen address; the host must be a loopback address (port 0: any free port)")
	cmd.Flags().StringArrayVar(&images, "image", nil, "push a generated image, REPOSITORY:TAG, before serving; repeatable")
	_ = cmd.MarkFlagRequired("access")
	return cmd
}

// pushGenerated pushes a small random image, its content seeded by its
// name so that a restart serves the same digest.
func pushGenerated(ctx context.Context, out io.Writer, reg *registry.Registry, ref string) error {
	i := strings.LastIndexByte(ref, ':')
	if i <= 0 || i == len(ref)-1 || strings.Contains(ref[i:], "/") {
		return fmt.Errorf("--image %q: want REPOSITORY:TAG", sanitize(ref))
	}
	h := fnv.New64a()
	h.Write([]byte(ref))
	img, err := registry.Image(int64(h.Sum64()>>1), 2, 4096)
	if err != nil {
		return err
	}
	p, err := reg.Push(ctx, ref[:i], ref[i+1:], img)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Pushed %s (%s)\n", p.Reference, p.Digest)
	return nil
}

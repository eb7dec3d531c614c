package nodeinstall

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/pullguard/pullguard/pkg/nodeconfig"
)

// configDirKeeps says whether giving the kubelet a --config-dir leaves its
// file meaning what it means. A kubelet with a --config-dir (even an empty
// one) merges its drop-ins over its file written out as JSON
// (cmd/kubelet/app's mergeKubeletConfigurations), where an empty list or
// map is left out, and then defaults the result: `enforceNodeAllocatable:
// []` becomes `[pods]` (which a kubelet with cgroupsPerQOS off refuses to
// start with), `evictionHard: {}` the default thresholds. When the file
// sets such a field (defaultedWhenNil), install merges the settings into
// the file instead, and says why.
func (p *Plan) configDirKeeps(o Options, main *configFile) bool {
	if main == nil {
		return true
	}
	cfg, _, err := nodeconfig.LoadKubeletConfig(hostPath(o.Root, main.path))
	if err != nil {
		// The file's own reading refuses it with its line, later.
		return true
	}
	lost := emptiedByJSON(cfg)
	if len(lost) == 0 {
		return true
	}
	p.Notes = append(p.Notes, fmt.Sprintf("%s sets %s empty: a kubelet given a --config-dir reads its file through JSON, which leaves an empty list or map out, and takes the default instead; so the settings are merged into the file rather than given a --config-dir",
		main.path, strings.Join(lost, ", ")))
	return false
}

// defaultedWhenNil are the kubelet's fields (JSON paths) that get a value
// when they are nil and keep an empty one: the kubelet v1.36 defaults
// enforceNodeAllocatable (pkg/kubelet/apis/config/v1beta1, SetDefaults) and
// evictionHard (cmd/kubelet/app, run) only when unset. Every other empty list
// or map means what nil means (evictionSoft: {} and no evictionSoft alike).
var defaultedWhenNil = []string{"enforceNodeAllocatable", "evictionHard"}

// emptiedByJSON returns the fields of cfg (their JSON paths) that writing
// it as JSON leaves out although the file set them, and that the kubelet
// then defaults: empty, non-nil lists and maps under an omitempty tag, of
// defaultedWhenNil.
func emptiedByJSON(cfg *kubeletconfig.KubeletConfiguration) []string {
	var lost []string
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			child := path
			if name != "" {
				child = strings.TrimPrefix(path+"."+name, ".")
			}
			fv := v.Field(i)
			switch fv.Kind() {
			case reflect.Slice, reflect.Map:
				if !fv.IsNil() && fv.Len() == 0 && slices.Contains(strings.Split(opts, ","), "omitempty") && slices.Contains(defaultedWhenNil, child) {
					lost = append(lost, child)
				}
			case reflect.Struct, reflect.Pointer:
				walk(fv, child)
			}
		}
	}
	walk(reflect.ValueOf(cfg), "")
	slices.Sort(lost)
	return lost
}

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratekeeper/ratekeeper/internal/server"
	"github.com/ratekeeper/ratekeeper/rls"
)

// k8sDoc is one document of a file in deploy/kubernetes: its kind and
// name, and its node, to decode again as that kind. The k8s types below
// hold the fields the tests check; the decoder ignores the others.
type k8sDoc struct {
	file     string
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	node *yaml.Node
}

type k8sConfigMap struct {
	Data map[string]string `yaml:"data"`
}

type k8sDeployment struct {
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec k8sPodSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sPodSpec struct {
	SecurityContext struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
		RunAsUser    *int  `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	TerminationGracePeriodSeconds *int           `yaml:"terminationGracePeriodSeconds"`
	Containers                    []k8sContainer `yaml:"containers"`
	Volumes                       []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	Lifecycle      struct {
		PreStop struct {
			Sleep struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext struct {
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string    `yaml:"path"`
		Port yaml.Node `yaml:"port"`
	} `yaml:"httpGet"`
	TCPSocket *struct {
		Port yaml.Node `yaml:"port"`
	} `yaml:"tcpSocket"`
}

type k8sService struct {
	Spec struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Name       string    `yaml:"name"`
			Port       int       `yaml:"port"`
			TargetPort yaml.Node `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type k8sKustomization struct {
	Resources []string `yaml:"resources"`
}

// manifests decodes every document of every file in deploy/kubernetes.
func manifests(t *testing.T) []k8sDoc {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy", "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var docs []k8sDoc
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var n yaml.Node
			if err := dec.Decode(&n); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			d := k8sDoc{file: filepath.Base(f), node: &n}
			if err := n.Decode(&d); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if d.Kind == "" || d.Metadata.Name == "" && d.Kind != "Kustomization" {
				t.Fatalf("%s:%d: a document without kind or metadata.name", f, n.Line)
			}
			docs = append(docs, d)
		}
	}
	return docs
}

func decodeAs[T any](t *testing.T, d k8sDoc) *T {
	t.Helper()
	var v T
	if err := d.node.Decode(&v); err != nil {
		t.Fatalf("%s: %s %s: %v", d.file, d.Kind, d.Metadata.Name, err)
	}
	return &v
}

// resolvePort is a probe's or a Service's port (a number, or a container
// port's name) as a number, or 0.
func (c *k8sContainer) resolvePort(n yaml.Node) int {
	if p, err := strconv.Atoi(n.Value); err == nil {
		return p
	}
	for _, p := range c.Ports {
		if p.Name == n.Value {
			return p.ContainerPort
		}
	}
	return 0
}

// kubeletVolume writes files into a new directory laid out as the kubelet
// mounts a ConfigMap: the data in a timestamped directory, ..data linking
// to it, each key a link through ..data. swap replaces the data as the
// kubelet does (internal/watch's test has the same layout).
type kubeletVolume struct {
	t        *testing.T
	dir, old string
	gen      int
}

func newKubeletVolume(t *testing.T, files map[string]string) *kubeletVolume {
	t.Helper()
	k := &kubeletVolume{t: t, dir: t.TempDir()}
	k.swap(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(k.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

func (k *kubeletVolume) swap(files map[string]string) {
	k.t.Helper()
	k.gen++
	ts := fmt.Sprintf("..2026_11_23_21_00_%02d.%09d", k.gen, k.gen)
	if err := os.Mkdir(filepath.Join(k.dir, ts), 0o755); err != nil {
		k.t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(k.dir, ts, name), []byte(content), 0o644); err != nil {
			k.t.Fatal(err)
		}
	}
	tmp := filepath.Join(k.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		k.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(k.dir, "..data")); err != nil {
		k.t.Fatal(err)
	}
	if k.old != "" {
		if err := os.RemoveAll(filepath.Join(k.dir, k.old)); err != nil {
			k.t.Fatal(err)
		}
	}
	k.old = ts
}

// TestKubernetesManifests holds deploy/kubernetes to the binary: each
// ratekeeper container's args are flags of its subcommand; --config is a
// ConfigMap mounted as a directory (no subPath, so that updates arrive),
// and that ConfigMap, laid out as the kubelet mounts it, passes `check`
// (the gateway's) or the rules loader (serve's); the container's ports are
// exactly its listeners, on all interfaces; its probes are the admin
// listener's /readyz and /healthz; the pods run as non-root with a
// read-only root, no capabilities, no privilege escalation and resource
// requests; each Service's targetPort is a port of the pods it selects;
// kustomization.yaml lists every file.
func TestKubernetesManifests(t *testing.T) {
	bin := binary(t)
	docs := manifests(t)
	configMaps := map[string]*k8sConfigMap{}
	type pod struct {
		labels map[string]string
		spec   *k8sPodSpec
	}
	var pods []pod
	var files []string
	for _, d := range docs {
		if !slices.Contains(files, d.file) {
			files = append(files, d.file)
		}
		switch d.Kind {
		case "ConfigMap":
			configMaps[d.Metadata.Name] = decodeAs[k8sConfigMap](t, d)
		case "Deployment":
			dep := decodeAs[k8sDeployment](t, d)
			for k, v := range dep.Spec.Selector.MatchLabels {
				if dep.Spec.Template.Metadata.Labels[k] != v {
					t.Errorf("%s: Deployment %s: the selector %s=%s does not select its pods", d.file, d.Metadata.Name, k, v)
				}
			}
			pods = append(pods, pod{dep.Spec.Template.Metadata.Labels, &dep.Spec.Template.Spec})
		}
	}
	checked := map[string]bool{}
	for _, p := range pods {
		spec := p.spec
		if spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot || spec.SecurityContext.RunAsUser == nil || *spec.SecurityContext.RunAsUser == 0 {
			t.Errorf("pod %v: want runAsNonRoot and a non-root runAsUser", p.labels)
		}
		for i := range spec.Containers {
			c := &spec.Containers[i]
			sc := c.SecurityContext
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
				t.Errorf("container %s: want allowPrivilegeEscalation false, readOnlyRootFilesystem true, capabilities drop [ALL]", c.Name)
			}
			if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" {
				t.Errorf("container %s: no cpu and memory requests", c.Name)
			}
			if !strings.HasPrefix(c.Image, "ratekeeper:") {
				continue
			}
			checkRatekeeperContainer(t, bin, c, spec, configMaps)
			checked[c.Args[0]] = true
			if g := spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= server.DefaultShutdownTimeout+time.Duration(c.Lifecycle.PreStop.Sleep.Seconds)*time.Second {
				t.Errorf("container %s: terminationGracePeriodSeconds leaves no time past the preStop sleep and the shutdown timeout (%v)", c.Name, server.DefaultShutdownTimeout)
			}
		}
	}
	if !checked["proxy"] || !checked["serve"] {
		t.Errorf("the manifests run %v: want proxy and serve", checked)
	}
	for _, d := range docs {
		switch d.Kind {
		case "Service":
			svc := decodeAs[k8sService](t, d)
			var selected []*k8sContainer
			for _, p := range pods {
				match := len(svc.Spec.Selector) > 0
				for k, v := range svc.Spec.Selector {
					match = match && p.labels[k] == v
				}
				if match {
					for i := range p.spec.Containers {
						selected = append(selected, &p.spec.Containers[i])
					}
				}
			}
			if len(selected) == 0 {
				t.Errorf("%s: Service %s selects no pod", d.file, d.Metadata.Name)
			}
			for _, sp := range svc.Spec.Ports {
				if !slices.ContainsFunc(selected, func(c *k8sContainer) bool { return c.resolvePort(sp.TargetPort) != 0 }) {
					t.Errorf("%s: Service %s port %s: targetPort %q is no container port of its pods", d.file, d.Metadata.Name, sp.Name, sp.TargetPort.Value)
				}
			}
		case "Kustomization":
			k := decodeAs[k8sKustomization](t, d)
			want := slices.DeleteFunc(slices.Clone(files), func(f string) bool { return f == d.file })
			slices.Sort(want)
			got := slices.Sorted(slices.Values(k.Resources))
			if !slices.Equal(got, want) {
				t.Errorf("%s: resources %v, want the directory's files %v", d.file, got, want)
			}
		}
	}
}

// checkRatekeeperContainer checks a container that runs the image: see
// TestKubernetesManifests.
func checkRatekeeperContainer(t *testing.T, bin string, c *k8sContainer, spec *k8sPodSpec, configMaps map[string]*k8sConfigMap) {
	t.Helper()
	if len(c.Command) > 0 || len(c.Args) == 0 {
		t.Fatalf("container %s: want args (the subcommand and its flags) and the image's ENTRYPOINT, not command %q", c.Name, c.Command)
	}
	sub := c.Args[0]
	if sub != "proxy" && sub != "serve" {
		t.Fatalf("container %s: runs %q, not proxy or serve", c.Name, sub)
	}
	flags, err := subcommandFlags(t, bin, sub).parse(c.Args[1:])
	if err != nil {
		t.Fatalf("container %s: %s %q: %v", c.Name, sub, c.Args[1:], err)
	}

	// --config: a file (proxy) or the directory (serve) of a ConfigMap
	// mounted whole.
	config := flags["config"]
	var dir, key string
	var cm *k8sConfigMap
	for _, m := range c.VolumeMounts {
		mount := path.Clean(m.MountPath)
		var k string
		switch {
		case path.Clean(config) == mount && sub == "serve":
		case path.Dir(config) == mount && sub == "proxy":
			k = path.Base(config)
		default:
			continue
		}
		if m.SubPath != "" {
			t.Errorf("container %s: %s is mounted with subPath: the kubelet never updates it", c.Name, m.MountPath)
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				cm, dir, key = configMaps[v.ConfigMap.Name], m.MountPath, k
			}
		}
	}
	if cm == nil {
		t.Fatalf("container %s: --config %s is not in a ConfigMap mounted as a directory", c.Name, config)
	}
	vol := newKubeletVolume(t, cm.Data)
	var l listeners
	if sub == "proxy" {
		if _, ok := cm.Data[key]; !ok {
			t.Fatalf("container %s: --config %s: the ConfigMap mounted at %s has no key %s", c.Name, config, dir, key)
		}
		file := filepath.Join(vol.dir, key)
		if out, err := exec.Command(bin, "check", "--config", file).CombinedOutput(); err != nil {
			t.Errorf("container %s: check --config %s: %v\n%s", c.Name, config, err, out)
		}
		l = proxyListeners(t, flags, file)
	} else {
		if _, err := rls.Load(vol.dir); err != nil {
			t.Errorf("container %s: the rules in %s: %v", c.Name, config, err)
		}
		l = serveListeners(flags)
	}

	// Ports: exactly the listeners', on all interfaces.
	var want, got []int
	for what, addr := range l {
		if !onAllInterfaces(addr) {
			t.Errorf("container %s: %s listens on %s, out of the pod's reach", c.Name, what, addr)
		}
		want = append(want, port(t, addr))
	}
	for _, p := range c.Ports {
		got = append(got, p.ContainerPort)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("container %s: containerPorts %v, want the listeners' %v (%v)", c.Name, got, want, l)
	}

	// Probes: the admin listener's paths that answer while serving.
	admin, ok := l["admin"]
	if !ok {
		t.Fatalf("container %s: no admin listener for the probes", c.Name)
	}
	for _, pr := range []struct {
		name string
		p    *k8sProbe
		path string
	}{{"readinessProbe", c.ReadinessProbe, "/readyz"}, {"livenessProbe", c.LivenessProbe, "/healthz"}} {
		switch {
		case pr.p == nil || pr.p.HTTPGet == nil:
			t.Errorf("container %s: no %s httpGet", c.Name, pr.name)
		case pr.p.HTTPGet.Path != pr.path || !adminPathAnswers(pr.p.HTTPGet.Path):
			t.Errorf("container %s: %s path %s, want the admin listener's %s", c.Name, pr.name, pr.p.HTTPGet.Path, pr.path)
		case c.resolvePort(pr.p.HTTPGet.Port) != port(t, admin):
			t.Errorf("container %s: %s port %s, want the admin listener's %s", c.Name, pr.name, pr.p.HTTPGet.Port.Value, admin)
		}
	}
}

// yamlBlocks are the ```yaml blocks of a Markdown file that begin with
// prefix, in order.
func yamlBlocks(t *testing.T, file, prefix string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?ms)^```yaml\n(.*?)^```").FindAllStringSubmatch(string(b), -1) {
		if strings.HasPrefix(m[1], prefix) {
			blocks = append(blocks, m[1])
		}
	}
	return blocks
}

func sameYAML(t *testing.T, a, b string) bool {
	t.Helper()
	var va, vb any
	if err := yaml.Unmarshal([]byte(a), &va); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(va, vb)
}

// holdsYAML reports whether the document whole has, at any depth, a map
// with every key of the map part and the same values.
func holdsYAML(t *testing.T, whole, part string) bool {
	t.Helper()
	var vw any
	var vp map[string]any
	if err := yaml.Unmarshal([]byte(whole), &vw); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(part), &vp); err != nil || len(vp) == 0 {
		t.Fatalf("%v: %s", err, part)
	}
	var holds func(v any) bool
	holds = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			all := true
			for k, pv := range vp {
				all = all && reflect.DeepEqual(v[k], pv)
			}
			if all {
				return true
			}
			for _, c := range v {
				if holds(c) {
					return true
				}
			}
		case []any:
			return slices.ContainsFunc(v, holds)
		}
		return false
	}
	return holds(vw)
}

// dig walks v by map keys and list indices; nil when a step is missing.
func dig(v any, steps ...any) any {
	for _, s := range steps {
		switch k := s.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func list(v any) []any { l, _ := v.([]any); return l }

// TestEnvoyManifest holds Envoy's ConfigMap to docs/envoy.md (the same
// configuration and rules) and to ratekeeper serve's manifests: the rate
// limit filter's cluster speaks HTTP/2 to the Service of serve's gRPC
// listener, its domain is the rules', and the descriptors its routes send
// have limits in the rules.
func TestEnvoyManifest(t *testing.T) {
	docs := manifests(t)
	find := func(kind, name string) k8sDoc {
		for _, d := range docs {
			if d.Kind == kind && d.Metadata.Name == name {
				return d
			}
		}
		t.Fatalf("no %s %s in deploy/kubernetes", kind, name)
		return k8sDoc{}
	}
	envoyCM := decodeAs[k8sConfigMap](t, find("ConfigMap", "envoy"))
	rulesCM := decodeAs[k8sConfigMap](t, find("ConfigMap", "ratekeeper-ratelimit"))
	doc := filepath.Join(repoRoot, "docs", "envoy.md")
	envoyParts, ruleDocs := yamlBlocks(t, doc, "# envoy.yaml, "), yamlBlocks(t, doc, "domain: edge")
	if len(envoyParts) != 3 || len(ruleDocs) != 1 {
		t.Fatalf("docs/envoy.md: %d parts of envoy.yaml and %d edge.yaml, want 3 and 1", len(envoyParts), len(ruleDocs))
	}
	for _, part := range envoyParts {
		if !holdsYAML(t, envoyCM.Data["envoy.yaml"], part) {
			t.Errorf("ConfigMap envoy's envoy.yaml holds no map with all of docs/envoy.md's\n%s", part)
		}
	}
	if !sameYAML(t, rulesCM.Data["edge.yaml"], ruleDocs[0]) {
		t.Error("ConfigMap ratekeeper-ratelimit's edge.yaml is not docs/envoy.md's")
	}

	// Envoy's Deployment reads the ConfigMap.
	dep := decodeAs[k8sDeployment](t, find("Deployment", "envoy"))
	c := dep.Spec.Template.Spec.Containers[0]
	cfgPath := ""
	for i, a := range c.Args {
		if (a == "-c" || a == "--config-path") && i+1 < len(c.Args) {
			cfgPath = c.Args[i+1]
		}
	}
	if len(c.VolumeMounts) != 1 || path.Join(c.VolumeMounts[0].MountPath, "envoy.yaml") != cfgPath {
		t.Errorf("envoy runs -c %q, not the envoy.yaml of its mounted ConfigMap", cfgPath)
	}

	var envoy any
	if err := yaml.Unmarshal([]byte(envoyCM.Data["envoy.yaml"]), &envoy); err != nil {
		t.Fatal(err)
	}
	// The rate limit filter, and the descriptors the routes send.
	var filter any
	var descriptors [][]string
	for _, l := range list(dig(envoy, "static_resources", "listeners")) {
		for _, fc := range list(dig(l, "filter_chains")) {
			for _, f := range list(dig(fc, "filters")) {
				hcm := dig(f, "typed_config")
				for _, hf := range list(dig(hcm, "http_filters")) {
					if dig(hf, "name") == "envoy.filters.http.ratelimit" {
						filter = dig(hf, "typed_config")
					}
				}
				for _, vh := range list(dig(hcm, "route_config", "virtual_hosts")) {
					for _, r := range list(dig(vh, "routes")) {
						for _, rl := range list(dig(r, "route", "rate_limits")) {
							var keys []string
							for _, a := range list(dig(rl, "actions")) {
								switch {
								case dig(a, "remote_address") != nil:
									keys = append(keys, "remote_address")
								case dig(a, "request_headers") != nil:
									keys = append(keys, fmt.Sprint(dig(a, "request_headers", "descriptor_key")))
								default:
									t.Errorf("an action this test does not know: %v", a)
								}
							}
							descriptors = append(descriptors, keys)
						}
					}
				}
			}
		}
	}
	if filter == nil || len(descriptors) == 0 {
		t.Fatal("envoy.yaml: no envoy.filters.http.ratelimit filter, or no rate_limits on the routes")
	}
	vol := newKubeletVolume(t, rulesCM.Data)
	rulesCfg, err := rls.Load(vol.dir)
	if err != nil {
		t.Fatal(err)
	}
	var domain *rls.DomainConfig
	for i := range rulesCfg.Domains {
		if rulesCfg.Domains[i].Domain == dig(filter, "domain") {
			domain = &rulesCfg.Domains[i]
		}
	}
	if domain == nil {
		t.Fatalf("the filter's domain %v is not in the rules", dig(filter, "domain"))
	}
	for _, keys := range descriptors {
		if !limited(domain.Descriptors, keys) {
			t.Errorf("Envoy sends the descriptor %v, which no limit of domain %s has", keys, domain.Domain)
		}
	}

	// The filter's cluster: HTTP/2 to the Service of serve's gRPC port.
	clusterName := dig(filter, "rate_limit_service", "grpc_service", "envoy_grpc", "cluster_name")
	var cluster any
	for _, cl := range list(dig(envoy, "static_resources", "clusters")) {
		if dig(cl, "name") == clusterName {
			cluster = cl
		}
	}
	if dig(cluster, "typed_extension_protocol_options", "envoy.extensions.upstreams.http.v3.HttpProtocolOptions", "explicit_http_config", "http2_protocol_options") == nil {
		t.Errorf("cluster %v does not speak HTTP/2, which gRPC needs", clusterName)
	}
	addr := dig(cluster, "load_assignment", "endpoints", 0, "lb_endpoints", 0, "endpoint", "address", "socket_address")
	svc := decodeAs[k8sService](t, find("Service", fmt.Sprint(dig(addr, "address"))))
	serve := decodeAs[k8sDeployment](t, find("Deployment", "ratekeeper"))
	rk := serve.Spec.Template.Spec.Containers[0]
	flags, err := subcommandFlags(t, binary(t), "serve").parse(rk.Args[1:])
	if err != nil {
		t.Fatal(err)
	}
	grpcPort := port(t, serveListeners(flags)["grpc"])
	found := false
	for _, sp := range svc.Spec.Ports {
		if sp.Port == dig(addr, "port_value") {
			found = true
			if rk.resolvePort(sp.TargetPort) != grpcPort {
				t.Errorf("Service %v port %d goes to %s, not serve's gRPC port %d", dig(addr, "address"), sp.Port, sp.TargetPort.Value, grpcPort)
			}
		}
	}
	if !found {
		t.Errorf("Envoy reaches %v:%v, which the Service does not serve", dig(addr, "address"), dig(addr, "port_value"))
	}
}

// limited reports whether a descriptor of keys reaches a limit in ds.
func limited(ds []rls.DescriptorConfig, keys []string) bool {
	for _, d := range ds {
		if d.Key != keys[0] {
			continue
		}
		if len(keys) == 1 && d.RateLimit != nil || len(keys) > 1 && limited(d.Descriptors, keys[1:]) {
			return true
		}
	}
	return false
}

// TestE2EConfigMapUpdateReloads runs proxy and serve on the manifests'
// ConfigMaps laid out as the kubelet mounts them, makes the update the
// kubelet makes (..data swapped), and waits for the reload.
func TestE2EConfigMapUpdateReloads(t *testing.T) {
	cms := map[string]*k8sConfigMap{}
	for _, d := range manifests(t) {
		if d.Kind == "ConfigMap" {
			cms[d.Metadata.Name] = decodeAs[k8sConfigMap](t, d)
		}
	}
	t.Run("proxy", func(t *testing.T) {
		data := cms["ratekeeper-gateway"].Data["gateway.yaml"] + "watch: 50ms\n"
		vol := newKubeletVolume(t, map[string]string{"gateway.yaml": data})
		p := startProxyFile(t, filepath.Join(vol.dir, "gateway.yaml"), "--upstream", "builtin:demo")
		vol.swap(map[string]string{"gateway.yaml": strings.Replace(data, "rate: 20,", "rate: 21,", 1)})
		waitFor(t, "the reload", func() bool { return p.metric(`ratekeeper_config_reloads_total{result="success"}`) == 1 })
	})
	t.Run("serve", func(t *testing.T) {
		data := cms["ratekeeper-ratelimit"].Data["edge.yaml"]
		vol := newKubeletVolume(t, map[string]string{"edge.yaml": data})
		p := startServe(t, vol.dir)
		if got := p.ask("edge", 0, rd("remote_address", "10.0.0.1")).Statuses[0].CurrentLimit.GetRequestsPerUnit(); got != 20 {
			t.Fatalf("limit %d, want 20", got)
		}
		vol.swap(map[string]string{"edge.yaml": strings.Replace(data, "requests_per_unit: 20", "requests_per_unit: 21", 1)})
		waitFor(t, "the reload", func() bool {
			return p.ask("edge", 0, rd("remote_address", "10.0.0.1")).Statuses[0].CurrentLimit.GetRequestsPerUnit() == 21
		})
	})
}

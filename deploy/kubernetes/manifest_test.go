package kubernetes

import (
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

func decodeJob(t *testing.T, path string) *batchv1.Job {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var job batchv1.Job
	if err := yaml.UnmarshalStrict(data, &job); err != nil {
		t.Fatalf("%s: not a valid batch/v1 Job: %v", path, err)
	}
	if job.APIVersion != "batch/v1" || job.Kind != "Job" {
		t.Fatalf("%s: apiVersion/kind = %s/%s, want batch/v1/Job", path, job.APIVersion, job.Kind)
	}
	if len(job.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s: want exactly one container", path)
	}
	return &job
}

func TestShardsJob(t *testing.T) {
	job := decodeJob(t, "shards-job.yaml")
	s := job.Spec
	if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion {
		t.Fatal("shards job must be an Indexed Job: JOB_COMPLETION_INDEX picks the shard")
	}
	if s.Completions == nil || s.Parallelism == nil || *s.Completions != *s.Parallelism {
		t.Fatal("completions and parallelism must be set and equal: every shard runs at once")
	}
	n := int(*s.Completions)
	if s.BackoffLimit == nil || *s.BackoffLimit != 0 {
		t.Error("backoffLimit must be 0: a retried shard would send its share late")
	}
	if s.Template.Spec.RestartPolicy != "Never" {
		t.Error("restartPolicy must be Never, for the same reason")
	}
	c := s.Template.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	if len(c.Args) == 0 || c.Args[0] != "replay" {
		t.Fatalf("container args %q must run llmreplay replay", args)
	}
	m := regexp.MustCompile(`--shard=\$\(JOB_COMPLETION_INDEX\)/(\d+)`).FindStringSubmatch(args)
	if m == nil {
		t.Fatalf("args %q lack --shard=$(JOB_COMPLETION_INDEX)/N", args)
	}
	if got, _ := strconv.Atoi(m[1]); got != n {
		t.Errorf("--shard says %d shards, the Job runs %d", got, n)
	}
	for _, want := range []string{"--start-at=", "--trace=", "--endpoint=", "/results/shard-$(JOB_COMPLETION_INDEX).parquet"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	// Every $(VAR) the args use must be declared in env, or Kubernetes leaves it unexpanded.
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
		if e.Name == "LLMREPLAY_API_KEY" && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			t.Error("the API key must come from a Secret, never a literal value")
		}
	}
	for _, ref := range regexp.MustCompile(`\$\(([A-Z_]+)\)`).FindAllStringSubmatch(args, -1) {
		if !env[ref[1]] {
			t.Errorf("args use $(%s) but env does not declare it", ref[1])
		}
	}
	mounts := map[string]bool{}
	for _, v := range c.VolumeMounts {
		mounts[v.MountPath] = true
	}
	if !mounts["/results"] || !mounts["/data"] {
		t.Errorf("volume mounts %v: want /data (trace) and /results (shared results volume)", mounts)
	}
}

func TestAnalyzeJob(t *testing.T) {
	shards := decodeJob(t, "shards-job.yaml")
	job := decodeJob(t, "analyze-job.yaml")
	c := job.Spec.Template.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "analyze" {
		t.Fatalf("analyze job args %q must run llmreplay analyze", c.Args)
	}
	n := int(*shards.Spec.Completions)
	files := 0
	for _, a := range c.Args {
		if regexp.MustCompile(`^/results/shard-\d+\.parquet$`).MatchString(a) {
			files++
		}
	}
	if files != n && !contains(c.Args, "/results") {
		t.Errorf("analyze reads %d shard files (or the /results folder); the shards job writes %d", files, n)
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// manifest is the objects of one multi-document YAML file, by kind.
type manifest struct {
	path        string
	services    []corev1.Service
	claims      []corev1.PersistentVolumeClaim
	deployments []appsv1.Deployment
}

// decodeManifest decodes every document of path strictly into its Kubernetes type.
func decodeManifest(t *testing.T, path string) *manifest {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := &manifest{path: path}
	for i, doc := range strings.Split(string(data), "\n---\n") {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%s: document %d: %v", path, i+1, err)
		}
		var into any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 Service":
			m.services = append(m.services, corev1.Service{})
			into = &m.services[len(m.services)-1]
		case "v1 PersistentVolumeClaim":
			m.claims = append(m.claims, corev1.PersistentVolumeClaim{})
			into = &m.claims[len(m.claims)-1]
		case "apps/v1 Deployment":
			m.deployments = append(m.deployments, appsv1.Deployment{})
			into = &m.deployments[len(m.deployments)-1]
		default:
			t.Fatalf("%s: document %d is %s %s, not a kind this test checks", path, i+1, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("%s: document %d: not a valid %s: %v", path, i+1, tm.Kind, err)
		}
	}
	if len(m.services) != 1 || len(m.deployments) != 1 {
		t.Fatalf("%s: %d Services and %d Deployments, want one of each", path, len(m.services), len(m.deployments))
	}
	return m
}

// recordFlags are the flags of `llmreplay record` these manifests may use: the command's
// contract (--listen HOST:PORT, --upstream URL, -o FOLDER), all three required.
var recordFlags = map[string]bool{"listen": true, "upstream": true, "o": true}

// parseRecordArgs checks that args run `llmreplay record` with the contract's flags only
// (--name=value or --name value) and returns their values.
func parseRecordArgs(t *testing.T, path string, args []string) map[string]string {
	t.Helper()
	if len(args) == 0 || args[0] != "record" {
		t.Fatalf("%s: the proxy's args %q must run llmreplay record (the image's entrypoint is llmreplay)", path, args)
	}
	flags := map[string]string{}
	for i := 1; i < len(args); i++ {
		name, value, ok := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "-") || !recordFlags[name] {
			t.Fatalf("%s: the proxy's argument %q is not one of record's flags (--listen, --upstream, -o)", path, args[i])
		}
		if !ok {
			if i+1 >= len(args) {
				t.Fatalf("%s: the proxy's flag %q has no value", path, args[i])
			}
			i++
			value = args[i]
		}
		flags[name] = value
	}
	for name := range recordFlags {
		if flags[name] == "" {
			t.Errorf("%s: the proxy's args %q lack --%s", path, args, name)
		}
	}
	return flags
}

// checkRecorder checks the proxy container of a manifest: the image the shards use, the
// record contract's flags, a listening port that is the container's and the Service's
// target, the recording folder on a claim of the manifest, no Secret, a graceful stop
// and resources. It returns the parsed flags.
func checkRecorder(t *testing.T, m *manifest, c corev1.Container) map[string]string {
	t.Helper()
	shards := decodeJob(t, "shards-job.yaml")
	if want := shards.Spec.Template.Spec.Containers[0].Image; c.Image != want {
		t.Errorf("%s: the proxy's image %q, want the image deploy/Dockerfile builds, as the shards use: %q", m.path, c.Image, want)
	}
	flags := parseRecordArgs(t, m.path, c.Args)
	host, port, err := net.SplitHostPort(flags["listen"])
	if err != nil {
		t.Fatalf("%s: --listen %q: %v", m.path, flags["listen"], err)
	}
	if host != "0.0.0.0" {
		t.Errorf("%s: --listen %q: the Service reaches the proxy on the pod's address, so it must listen on 0.0.0.0", m.path, flags["listen"])
	}
	svc := m.services[0]
	if len(svc.Spec.Ports) != 1 {
		t.Fatalf("%s: Service %s has %d ports, want 1", m.path, svc.Name, len(svc.Spec.Ports))
	}
	if got := containerPort(c, svc.Spec.Ports[0].TargetPort); strconv.Itoa(int(got)) != port {
		t.Errorf("%s: the Service's targetPort %s is the proxy's port %d, but the proxy listens on %s", m.path, svc.Spec.Ports[0].TargetPort.String(), got, port)
	}
	pod := m.deployments[0].Spec.Template
	if !selects(svc.Spec.Selector, pod.Labels) || m.deployments[0].Spec.Selector == nil || !selects(m.deployments[0].Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("%s: the Service's selector %v and the Deployment's must match the pod's labels %v", m.path, svc.Spec.Selector, pod.Labels)
	}
	checkRecordingVolume(t, m, c, flags["o"])
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("%s: the proxy's env %s comes from a Secret: the API key stays with the client, the proxy needs none", m.path, e.Name)
		}
	}
	if len(c.EnvFrom) > 0 {
		t.Errorf("%s: the proxy takes env from %v: it needs no Secret or ConfigMap", m.path, c.EnvFrom)
	}
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || *g < 60 {
		t.Errorf("%s: terminationGracePeriodSeconds must be set and >= 60: the proxy writes its files after SIGTERM", m.path)
	}
	r := c.Resources
	if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
		t.Errorf("%s: the proxy needs CPU and memory requests and a memory limit (its memory is bounded), has %+v", m.path, r)
	}
	return flags
}

// checkRecordingVolume checks that dir is a mount of the container whose volume is a
// claim the manifest declares, and that every $(VAR) of its subPathExpr is in env.
func checkRecordingVolume(t *testing.T, m *manifest, c corev1.Container, dir string) {
	t.Helper()
	pod := m.deployments[0].Spec.Template.Spec
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == dir {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("%s: -o %s is not one of the proxy's volume mounts: the recording would die with the pod", m.path, dir)
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	for _, ref := range regexp.MustCompile(`\$\(([A-Z_]+)\)`).FindAllStringSubmatch(mount.SubPathExpr, -1) {
		if !env[ref[1]] {
			t.Errorf("%s: subPathExpr %q uses $(%s) but the proxy's env does not declare it", m.path, mount.SubPathExpr, ref[1])
		}
	}
	for _, v := range pod.Volumes {
		if v.Name != mount.Name {
			continue
		}
		if v.Secret != nil || v.PersistentVolumeClaim == nil {
			t.Fatalf("%s: the recording's volume %s must be a PersistentVolumeClaim", m.path, v.Name)
		}
		for _, pvc := range m.claims {
			if pvc.Name == v.PersistentVolumeClaim.ClaimName {
				return
			}
		}
		t.Fatalf("%s: the recording's claim %s is not declared in the file", m.path, v.PersistentVolumeClaim.ClaimName)
	}
	t.Fatalf("%s: the proxy mounts volume %q, which the pod does not declare", m.path, mount.Name)
}

// containerPort resolves a Service's targetPort (a name or a number) to c's port; 0 when
// c has no such port.
func containerPort(c corev1.Container, target intstr.IntOrString) int32 {
	for _, p := range c.Ports {
		if (target.Type == intstr.String && p.Name == target.StrVal) || (target.Type == intstr.Int && p.ContainerPort == target.IntVal) {
			return p.ContainerPort
		}
	}
	return 0
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// argValue returns the value of --name=value or --name value in args, "" when absent.
func argValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func TestRecordSidecar(t *testing.T) {
	m := decodeManifest(t, "record-sidecar.yaml")
	pod := m.deployments[0].Spec.Template.Spec
	if len(pod.InitContainers) != 1 || len(pod.Containers) != 1 {
		t.Fatalf("want the proxy as the one init container (a native sidecar) and vLLM as the one container")
	}
	proxy, vllm := pod.InitContainers[0], pod.Containers[0]
	if proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("the proxy must be a native sidecar (restartPolicy: Always): it then stops after vLLM, when no stream is left")
	}
	if proxy.StartupProbe == nil {
		t.Error("the proxy needs a startupProbe, so vLLM starts only once it listens")
	}
	flags := checkRecorder(t, m, proxy)
	// The proxy forwards to vLLM on the pod's loopback, where vLLM alone listens.
	host, port := argValue(vllm.Args, "host"), argValue(vllm.Args, "port")
	if host != "127.0.0.1" {
		t.Errorf("vLLM --host %q: want 127.0.0.1, so that nothing reaches it but through the proxy", host)
	}
	if want := "http://127.0.0.1:" + port; flags["upstream"] != want {
		t.Errorf("--upstream %q, want vLLM's address in the pod, %q", flags["upstream"], want)
	}
	// vLLM's probe cannot reach loopback: it goes through the proxy's port.
	if p := vllm.ReadinessProbe; p == nil || p.HTTPGet == nil || containerPort(proxy, p.HTTPGet.Port) == 0 {
		t.Error("vLLM's readinessProbe must be an httpGet on the proxy's port (vLLM listens on loopback)")
	}
}

func TestRecordService(t *testing.T) {
	m := decodeManifest(t, "record-service.yaml")
	pod := m.deployments[0].Spec.Template.Spec
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		t.Fatalf("want the proxy as the pod's one container")
	}
	flags := checkRecorder(t, m, pod.Containers[0])
	u, err := url.Parse(flags["upstream"])
	if err != nil || u.Scheme != "http" || !strings.HasSuffix(u.Hostname(), ".svc.cluster.local") || u.Port() == "" || strings.Trim(u.Path, "/") != "" {
		t.Errorf("--upstream %q: want the vLLM Service's server root, http://NAME.NAMESPACE.svc.cluster.local:PORT", flags["upstream"])
	}
	if m.services[0].Name == strings.Split(u.Hostname(), ".")[0] {
		t.Errorf("the proxy's Service %q is its own upstream", m.services[0].Name)
	}
}

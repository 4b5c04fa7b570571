package kubernetes

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
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

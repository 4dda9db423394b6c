// Command cri is a tiny CRI (runtime.v1) client for the nri-housekeeper e2e
// lab. It stands in for crictl and builds pod sandbox and container configs
// the way the kubelet does for best-effort pods (see lab.SandboxConfig and
// lab.ContainerConfig): kubelet labels, cgroup parent
// <cgroup-root>/besteffort/pod<uid> and a log directory <log-root>/<ns>_<name>_<uid>.
// Pods are hostNetwork unless -pod-net (or -port) gives them their own network
// namespace on the lab's CNI network.
//
//	cri [-sock PATH] COMMAND [flags]
//
// Commands (run `cri COMMAND -h` for flags):
//
//	version, status [-v]       runtime version / runtime+network conditions (-v: verbose info, e.g. cniconfig)
//	runp                       RunPodSandbox, prints the sandbox id
//	create                     CreateContainer in a pod (found by uid), prints the id
//	start|stop|rm ID           StartContainer / StopContainer / RemoveContainer
//	stopp|rmp ID               StopPodSandbox / RemovePodSandbox
//	pods|ps [-a]               ListPodSandbox / ListContainers (tab separated)
//	inspectp|inspect ID        verbose PodSandboxStatus / ContainerStatus as JSON
//	netinfo ID...              a pod sandbox's IP and netns path: "ID IP NETNS"
//	up                         runp + create + start in one go, prints "POD CTR"
//	down ID...                 stopp + rmp the given pods
//	lifecycle                  the full demo: every step with the states in between
//	leak                       leave a NotReady sandbox without containers behind
//	rmall                      stop and remove every pod (and container)
//	bench                      median time of run+stop+remove of a pod
//	scale                      start N pods with one container each, concurrently
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-housekeeper/nri-housekeeper/test/e2e/lab"
)

var (
	sock    = flag.String("sock", envOr("LAB_CRI_SOCK", "/tmp/nrihk-lab/containerd.sock"), "CRI socket (env LAB_CRI_SOCK)")
	timeout = flag.Duration("timeout", 2*time.Minute, "timeout of one command")
	rt      cri.RuntimeServiceClient
)

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: cri [-sock PATH] COMMAND [flags]; commands: version status runp create start stop rm stopp rmp pods ps inspectp inspect netinfo up down lifecycle leak rmall bench scale")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	conn, err := grpc.NewClient("unix://"+*sock,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		die(err)
	}
	defer conn.Close()
	rt = cri.NewRuntimeServiceClient(conn)

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cmd, args := flag.Arg(0), flag.Args()[1:]
	if err := dispatch(ctx, cmd, args); err != nil {
		die(err)
	}
}

func die(err error) {
	fmt.Fprintln(os.Stderr, "cri:", err)
	os.Exit(1)
}

// podFlags are the pod identity flags shared by several commands.
type podFlags struct {
	name, ns, uid, logRoot, cgroupRoot string
	attempt, cattempt                  uint
	podNet                             bool
	ports                              portFlags
}

// portFlags are -port HOSTPORT:CONTAINERPORT[/PROTO] flags.
type portFlags []lab.PortMapping

func (p *portFlags) String() string { return fmt.Sprint(*p) }

func (p *portFlags) Set(s string) error {
	spec, proto, _ := strings.Cut(s, "/")
	h, c, ok := strings.Cut(spec, ":")
	hp, err1 := strconv.ParseUint(h, 10, 16)
	cp, err2 := strconv.ParseUint(c, 10, 16)
	if !ok || err1 != nil || err2 != nil || hp == 0 || cp == 0 {
		return fmt.Errorf("want HOSTPORT:CONTAINERPORT[/tcp|udp|sctp], not %q", s)
	}
	*p = append(*p, lab.PortMapping{HostPort: int32(hp), ContainerPort: int32(cp), Protocol: strings.ToUpper(proto)})
	return nil
}

func (p *podFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.name, "name", "lab-pod", "pod name")
	fs.StringVar(&p.ns, "ns", "default", "pod namespace")
	fs.StringVar(&p.uid, "uid", "", "pod uid (random when empty)")
	fs.StringVar(&p.logRoot, "log-root", envOr("LAB_LOG_ROOT", "/tmp/nrihk-lab/log/pods"), "root of pod log directories (env LAB_LOG_ROOT)")
	fs.StringVar(&p.cgroupRoot, "cgroup-root", envOr("LAB_CGROUP_ROOT", "/kubepods"), "kubepods cgroup root (env LAB_CGROUP_ROOT)")
	fs.UintVar(&p.attempt, "attempt", 0, "sandbox attempt (a new sandbox for the same pod needs a higher one)")
	fs.UintVar(&p.cattempt, "cattempt", 0, "container attempt = restart count (a restarted container needs a higher one)")
	fs.BoolVar(&p.podNet, "pod-net", false, "own network namespace on the lab's CNI network (default: hostNetwork)")
	fs.Var(&p.ports, "port", "hostPort HOSTPORT:CONTAINERPORT[/PROTO] (repeatable; implies -pod-net)")
}

func (p *podFlags) ensureUID() {
	if p.uid == "" {
		p.uid = lab.NewUID()
	}
}

func (p *podFlags) pod() lab.Pod {
	pod := lab.Pod{Name: p.name, Namespace: p.ns, UID: p.uid, Attempt: uint32(p.attempt)}
	if p.podNet || len(p.ports) > 0 {
		pod.Network = &lab.PodNetwork{Ports: p.ports}
	}
	return pod
}

func (p *podFlags) sandboxConfig() *cri.PodSandboxConfig {
	return lab.SandboxConfig(p.pod(), p.logRoot, p.cgroupRoot)
}

func (p *podFlags) containerConfig(cname, image string, args []string) *cri.ContainerConfig {
	return lab.ContainerConfig(p.pod(), cname, uint32(p.cattempt), image, args...)
}

func (p *podFlags) runPod(ctx context.Context) (string, error) {
	cfg := p.sandboxConfig()
	// The kubelet creates the pod log directory before RunPodSandbox.
	if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
		return "", err
	}
	r, err := rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return "", fmt.Errorf("RunPodSandbox %s/%s: %w", p.ns, p.name, err)
	}
	return r.PodSandboxId, nil
}

func (p *podFlags) createContainer(ctx context.Context, podID, cname, image string, args []string) (string, error) {
	r, err := rt.CreateContainer(ctx, &cri.CreateContainerRequest{
		PodSandboxId:  podID,
		Config:        p.containerConfig(cname, image, args),
		SandboxConfig: p.sandboxConfig(),
	})
	if err != nil {
		return "", fmt.Errorf("CreateContainer %s in %s: %w", cname, podID, err)
	}
	return r.ContainerId, nil
}

func stopRemovePod(ctx context.Context, id string) error {
	if _, err := rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("StopPodSandbox %s: %w", id, err)
	}
	if _, err := rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("RemovePodSandbox %s: %w", id, err)
	}
	return nil
}

func dispatch(ctx context.Context, cmd string, args []string) error {
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	var pf podFlags
	switch cmd {
	case "version":
		r, err := rt.Version(ctx, &cri.VersionRequest{})
		if err != nil {
			return err
		}
		fmt.Printf("%s %s (CRI %s)\n", r.RuntimeName, r.RuntimeVersion, r.RuntimeApiVersion)
	case "status":
		verbose := fs.Bool("v", false, "also print the verbose info (cniconfig, lastCNILoadStatus, ...)")
		_ = fs.Parse(args)
		r, err := rt.Status(ctx, &cri.StatusRequest{Verbose: *verbose})
		if err != nil {
			return err
		}
		for _, c := range r.Status.GetConditions() {
			fmt.Printf("%s=%v %s %s\n", c.Type, c.Status, c.Reason, c.Message)
		}
		keys := make([]string, 0, len(r.Info))
		for k := range r.Info {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Printf("%s: %s\n", k, r.Info[k])
		}
	case "runp":
		pf.register(fs)
		_ = fs.Parse(args)
		pf.ensureUID()
		id, err := pf.runPod(ctx)
		if err != nil {
			return err
		}
		fmt.Println(id)
	case "create":
		pf.register(fs)
		cname := fs.String("cname", "sleeper", "container name")
		image := fs.String("image", "localhost/sleeper:lab", "container image")
		podID := fs.String("pod-id", "", "sandbox id (looked up by -uid when empty)")
		_ = fs.Parse(args)
		if pf.uid == "" {
			return fmt.Errorf("create needs -uid (and -name/-ns) of the pod")
		}
		if *podID == "" {
			pods, err := rt.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{Filter: &cri.PodSandboxFilter{
				LabelSelector: map[string]string{"io.kubernetes.pod.uid": pf.uid},
				State:         &cri.PodSandboxStateValue{State: cri.PodSandboxState_SANDBOX_READY}}})
			if err != nil {
				return err
			}
			if len(pods.Items) != 1 {
				return fmt.Errorf("found %d ready pods with uid %s", len(pods.Items), pf.uid)
			}
			*podID = pods.Items[0].Id
		}
		id, err := pf.createContainer(ctx, *podID, *cname, *image, fs.Args())
		if err != nil {
			return err
		}
		fmt.Println(id)
	case "start", "stop", "rm", "stopp", "rmp":
		grace := fs.Int64("t", 10, "stop timeout in seconds (stop)")
		_ = fs.Parse(args)
		for _, id := range fs.Args() {
			var err error
			switch cmd {
			case "start":
				_, err = rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: id})
			case "stop":
				_, err = rt.StopContainer(ctx, &cri.StopContainerRequest{ContainerId: id, Timeout: *grace})
			case "rm":
				_, err = rt.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: id})
			case "stopp":
				_, err = rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: id})
			case "rmp":
				_, err = rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: id})
			}
			if err != nil {
				return fmt.Errorf("%s %s: %w", cmd, id, err)
			}
		}
	case "pods":
		all := fs.Bool("a", true, "include NotReady sandboxes")
		_ = fs.Parse(args)
		return listPods(ctx, *all)
	case "ps":
		all := fs.Bool("a", true, "include exited containers")
		_ = fs.Parse(args)
		return listContainers(ctx, *all)
	case "inspectp", "inspect":
		_ = fs.Parse(args)
		for _, id := range fs.Args() {
			var v any
			var err error
			if cmd == "inspectp" {
				v, err = rt.PodSandboxStatus(ctx, &cri.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
			} else {
				v, err = rt.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: id, Verbose: true})
			}
			if err != nil {
				return err
			}
			printJSON(v)
		}
	case "netinfo":
		_ = fs.Parse(args)
		for _, id := range fs.Args() {
			n, err := lab.SandboxNetwork(ctx, rt, id)
			if err != nil {
				return err
			}
			fmt.Println(id, orDash(n.IP), orDash(n.NetnsPath))
		}
	case "up":
		pf.register(fs)
		cname := fs.String("cname", "sleeper", "container name")
		image := fs.String("image", "localhost/sleeper:lab", "container image")
		_ = fs.Parse(args)
		pf.ensureUID()
		podID, ctrID, err := pf.up(ctx, *cname, *image, fs.Args())
		if err != nil {
			return err
		}
		fmt.Println(podID, ctrID)
	case "down":
		_ = fs.Parse(args)
		for _, id := range fs.Args() {
			if err := stopRemovePod(ctx, id); err != nil {
				return err
			}
		}
	case "lifecycle":
		pf.register(fs)
		image := fs.String("image", "localhost/sleeper:lab", "container image")
		keep := fs.Bool("keep", false, "stop after StartContainer (leave pod running)")
		_ = fs.Parse(args)
		pf.ensureUID()
		return lifecycle(ctx, &pf, *image, *keep)
	case "leak":
		pf.register(fs)
		_ = fs.Parse(args)
		pf.ensureUID()
		id, err := pf.runPod(ctx)
		if err != nil {
			return err
		}
		if _, err := rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
			return err
		}
		fmt.Println(id)
	case "rmall":
		return rmAll(ctx)
	case "bench":
		pf.register(fs)
		n := fs.Int("n", 20, "iterations")
		withCtr := fs.Bool("container", false, "also create+start a container in each pod")
		image := fs.String("image", "localhost/sleeper:lab", "container image")
		_ = fs.Parse(args)
		return bench(ctx, &pf, *n, *withCtr, *image)
	case "scale":
		pf.register(fs)
		n := fs.Int("n", 100, "number of pods")
		par := fs.Int("p", 4, "parallel CRI clients")
		image := fs.String("image", "localhost/sleeper:lab", "container image")
		_ = fs.Parse(args)
		return scale(ctx, &pf, *n, *par, *image)
	default:
		flag.Usage()
		os.Exit(2)
	}
	return nil
}

func (p *podFlags) up(ctx context.Context, cname, image string, args []string) (string, string, error) {
	podID, err := p.runPod(ctx)
	if err != nil {
		return "", "", err
	}
	ctrID, err := p.createContainer(ctx, podID, cname, image, args)
	if err != nil {
		return podID, "", err
	}
	if _, err := rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: ctrID}); err != nil {
		return podID, ctrID, fmt.Errorf("StartContainer %s: %w", ctrID, err)
	}
	return podID, ctrID, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printJSON(v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Println(string(b))
}

func short(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

func listPods(ctx context.Context, all bool) error {
	req := &cri.ListPodSandboxRequest{}
	if !all {
		req.Filter = &cri.PodSandboxFilter{State: &cri.PodSandboxStateValue{State: cri.PodSandboxState_SANDBOX_READY}}
	}
	r, err := rt.ListPodSandbox(ctx, req)
	if err != nil {
		return err
	}
	sort.Slice(r.Items, func(i, j int) bool { return r.Items[i].CreatedAt < r.Items[j].CreatedAt })
	fmt.Printf("POD_ID\tSTATE\tNAMESPACE/NAME\tUID\tAGE\n")
	for _, p := range r.Items {
		fmt.Printf("%s\t%s\t%s/%s\t%s\t%s\n", short(p.Id), p.State, p.Metadata.Namespace, p.Metadata.Name,
			p.Metadata.Uid, time.Since(time.Unix(0, p.CreatedAt)).Round(time.Second))
	}
	return nil
}

func listContainers(ctx context.Context, all bool) error {
	req := &cri.ListContainersRequest{}
	if !all {
		req.Filter = &cri.ContainerFilter{State: &cri.ContainerStateValue{State: cri.ContainerState_CONTAINER_RUNNING}}
	}
	r, err := rt.ListContainers(ctx, req)
	if err != nil {
		return err
	}
	sort.Slice(r.Containers, func(i, j int) bool { return r.Containers[i].CreatedAt < r.Containers[j].CreatedAt })
	fmt.Printf("CTR_ID\tSTATE\tNAME\tPOD_ID\tPOD\n")
	for _, c := range r.Containers {
		fmt.Printf("%s\t%s\t%s\t%s\t%s/%s\n", short(c.Id), c.State, c.Metadata.Name, short(c.PodSandboxId),
			c.Labels["io.kubernetes.pod.namespace"], c.Labels["io.kubernetes.pod.name"])
	}
	return nil
}

// verboseInfo digs pid and other details out of the runtime's verbose status.
func verboseInfo(info map[string]string) map[string]any {
	out := map[string]any{}
	if s, ok := info["info"]; ok {
		_ = json.Unmarshal([]byte(s), &out)
	}
	return out
}

func showPod(ctx context.Context, id string) {
	r, err := rt.PodSandboxStatus(ctx, &cri.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		fmt.Printf("  pod %s: status error: %v\n", short(id), err)
		return
	}
	info := verboseInfo(r.Info)
	cgroupParent := ""
	if cfg, ok := info["config"].(map[string]any); ok {
		if l, ok := cfg["linux"].(map[string]any); ok {
			cgroupParent, _ = l["cgroup_parent"].(string)
		}
	}
	fmt.Printf("  pod %s state=%s pid=%v ip=%s cgroup_parent=%s\n", short(id), r.Status.State, info["pid"],
		orDash(r.Status.GetNetwork().GetIp()), cgroupParent)
}

func showCtr(ctx context.Context, id string) {
	r, err := rt.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		fmt.Printf("  ctr %s: status error: %v\n", short(id), err)
		return
	}
	info := verboseInfo(r.Info)
	cgroupsPath := ""
	if spec, ok := info["runtimeSpec"].(map[string]any); ok {
		if l, ok := spec["linux"].(map[string]any); ok {
			cgroupsPath, _ = l["cgroupsPath"].(string)
		}
	}
	fmt.Printf("  ctr %s state=%s exit=%d reason=%q pid=%v cgroupsPath=%s log=%s\n", short(id), r.Status.State,
		r.Status.ExitCode, r.Status.Reason, info["pid"], cgroupsPath, r.Status.LogPath)
}

func lifecycle(ctx context.Context, p *podFlags, image string, keep bool) error {
	step := func(s string) { fmt.Printf("== %s\n", s) }
	step(fmt.Sprintf("RunPodSandbox %s/%s uid=%s", p.ns, p.name, p.uid))
	podID, err := p.runPod(ctx)
	if err != nil {
		return err
	}
	showPod(ctx, podID)
	step("CreateContainer sleeper")
	ctrID, err := p.createContainer(ctx, podID, "sleeper", image, []string{"-name", "sleeper", "-interval", "1s"})
	if err != nil {
		return err
	}
	showCtr(ctx, ctrID)
	step("StartContainer")
	if _, err := rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: ctrID}); err != nil {
		return err
	}
	showCtr(ctx, ctrID)
	step("ListPodSandbox / ListContainers")
	_ = listPods(ctx, true)
	_ = listContainers(ctx, true)
	if keep {
		fmt.Println(podID, ctrID)
		return nil
	}
	time.Sleep(1500 * time.Millisecond) // let the sleeper write a log line or two
	step("StopContainer (timeout 10s)")
	if _, err := rt.StopContainer(ctx, &cri.StopContainerRequest{ContainerId: ctrID, Timeout: 10}); err != nil {
		return err
	}
	showCtr(ctx, ctrID)
	step("StopPodSandbox")
	if _, err := rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		return err
	}
	showPod(ctx, podID)
	showCtr(ctx, ctrID)
	step("RemoveContainer")
	if _, err := rt.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: ctrID}); err != nil {
		return err
	}
	step("RemovePodSandbox")
	if _, err := rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		return err
	}
	step("ListPodSandbox / ListContainers after removal")
	_ = listPods(ctx, true)
	_ = listContainers(ctx, true)
	return nil
}

func rmAll(ctx context.Context) error {
	r, err := rt.ListPodSandbox(ctx, &cri.ListPodSandboxRequest{})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(r.Items))
	sem := make(chan struct{}, 8)
	for _, p := range r.Items {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := stopRemovePod(ctx, id); err != nil {
				errs <- err
			}
		}(p.Id)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	// Containers whose sandbox is already gone (should not happen with containerd).
	cs, err := rt.ListContainers(ctx, &cri.ListContainersRequest{})
	if err != nil {
		return err
	}
	for _, c := range cs.Containers {
		_, _ = rt.StopContainer(ctx, &cri.StopContainerRequest{ContainerId: c.Id, Timeout: 2})
		if _, err := rt.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: c.Id}); err != nil {
			return err
		}
	}
	fmt.Printf("removed %d pods, %d stray containers\n", len(r.Items), len(cs.Containers))
	return nil
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func bench(ctx context.Context, base *podFlags, n int, withCtr bool, image string) error {
	var total, run, stop, rm []time.Duration
	for i := 0; i < n; i++ {
		p := *base
		p.name = fmt.Sprintf("%s-bench-%d", base.name, i)
		p.uid = lab.NewUID()
		t0 := time.Now()
		var podID string
		var err error
		if withCtr {
			podID, _, err = p.up(ctx, "sleeper", image, nil)
		} else {
			podID, err = p.runPod(ctx)
		}
		if err != nil {
			return err
		}
		t1 := time.Now()
		if _, err := rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
			return err
		}
		t2 := time.Now()
		if _, err := rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
			return err
		}
		t3 := time.Now()
		run, stop, rm, total = append(run, t1.Sub(t0)), append(stop, t2.Sub(t1)), append(rm, t3.Sub(t2)), append(total, t3.Sub(t0))
	}
	what := "RunPodSandbox"
	if withCtr {
		what = "RunPodSandbox+CreateContainer+StartContainer"
	}
	fmt.Printf("bench n=%d run=[%s] median: run=%v stop=%v remove=%v total=%v (min %v max %v)\n", n, what,
		median(run).Round(time.Millisecond), median(stop).Round(time.Millisecond), median(rm).Round(time.Millisecond),
		median(total).Round(time.Millisecond), minD(total).Round(time.Millisecond), maxD(total).Round(time.Millisecond))
	return nil
}

func minD(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d {
		m = min(m, x)
	}
	return m
}

func maxD(d []time.Duration) time.Duration {
	m := d[0]
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

func scale(ctx context.Context, base *podFlags, n, par int, image string) error {
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	sem := make(chan struct{}, par)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			p := *base
			p.name = fmt.Sprintf("%s-%03d", base.name, i)
			p.uid = lab.NewUID()
			t0 := time.Now()
			_, _, err := p.up(ctx, "sleeper", image, nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			lat = append(lat, time.Since(t0))
		}(i)
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	el := time.Since(start)
	fmt.Printf("scale n=%d parallel=%d elapsed=%v per-pod(median)=%v max=%v throughput=%.1f pods/s\n", n, par,
		el.Round(time.Millisecond), median(lat).Round(time.Millisecond), maxD(lat).Round(time.Millisecond),
		float64(n)/el.Seconds())
	return nil
}

// Command fakeplugin is a CNI plugin for podnet's tests. It changes nothing
// on the node: it appends one line per call to the file its configuration's
// "log" key names,
//
//	<CNI_COMMAND> <CNI_CONTAINERID> <CNI_IFNAME> <CNI_NETNS> <plugin type> <CNI_ARGS> <runtimeConfig JSON>
//
// writes the call's PATH and working dir to "<log>.env", and passes the
// previous result on (ADD), so that a chain of them behaves
// like a real chain. With "failDel": true its DEL fails; with "hangDel":
// true it never ends (until killed); with "delInNetns": N its DEL spends N
// milliseconds in the namespace, from a thread that entered it, as
// loopback's and bridge's DELs do, and creates "<log>.in-netns" while there. The plugin type is
// the binary's name, as libcni finds it: the tests install one binary under
// several names.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"golang.org/x/sys/unix"
)

type conf struct {
	types.NetConf
	Log           string          `json:"log"`
	FailDel       bool            `json:"failDel"`
	HangDel       bool            `json:"hangDel"`
	DelInNetns    int             `json:"delInNetns"`
	RuntimeConfig json.RawMessage `json:"runtimeConfig"`
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: add, Del: del, Check: check}, version.All, "podnet test plugin")
}

func parse(args *skel.CmdArgs) (*conf, error) {
	c := &conf{}
	if err := json.Unmarshal(args.StdinData, c); err != nil {
		return nil, fmt.Errorf("parsing the configuration: %w", err)
	}
	if err := version.ParsePrevResult(&c.NetConf); err != nil {
		return nil, err
	}
	return c, nil
}

func record(c *conf, args *skel.CmdArgs) error {
	if c.Log == "" {
		return errors.New(`no "log" in the configuration`)
	}
	f, err := os.OpenFile(c.Log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	rc := string(c.RuntimeConfig)
	if rc == "" {
		rc = "{}"
	}
	netns := args.Netns
	if netns == "" {
		netns = "-"
	}
	cniArgs := args.Args
	if cniArgs == "" {
		cniArgs = "-"
	}
	_, err = fmt.Fprintf(f, "%s %s %s %s %s %s %s\n", os.Getenv("CNI_COMMAND"), args.ContainerID, args.IfName, netns, c.Type, cniArgs, rc)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// Where it ran: <log>.env holds the last call's PATH and working dir.
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	return os.WriteFile(c.Log+".env", []byte(fmt.Sprintf("PATH=%s\nCWD=%s\n", os.Getenv("PATH"), cwd)), 0o600)
}

func add(args *skel.CmdArgs) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	if err := record(c, args); err != nil {
		return err
	}
	if c.PrevResult != nil {
		return types.PrintResult(c.PrevResult, c.CNIVersion)
	}
	// 10.22.0.5 for the first container added, .6 for the second, ...:
	// two live attachments never share an address.
	ip := fmt.Sprintf("10.22.0.%d", 5+addOrder(c.Log, args.ContainerID))
	_, ipnet, _ := net.ParseCIDR(ip + "/16")
	ipnet.IP = net.ParseIP(ip)
	iface := 0
	result := &current.Result{
		CNIVersion: current.ImplementedSpecVersion,
		Interfaces: []*current.Interface{{Name: args.IfName, Sandbox: args.Netns}},
		IPs:        []*current.IPConfig{{Interface: &iface, Address: *ipnet}},
	}
	return types.PrintResult(result, c.CNIVersion)
}

// addOrder is how many other containers the log shows added before id's
// first ADD.
func addOrder(log, id string) int {
	data, err := os.ReadFile(log)
	if err != nil {
		return 0
	}
	var seen []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "ADD" || slices.Contains(seen, f[1]) {
			continue
		}
		if f[1] == id {
			return len(seen)
		}
		seen = append(seen, f[1])
	}
	return len(seen)
}

func del(args *skel.CmdArgs) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	if err := record(c, args); err != nil {
		return err
	}
	if c.FailDel {
		return errors.New("DEL fails, as configured")
	}
	if c.HangDel {
		time.Sleep(time.Hour)
	}
	if c.DelInNetns > 0 {
		return stayInNetns(args.Netns, time.Duration(c.DelInNetns)*time.Millisecond, c.Log+".in-netns")
	}
	return nil
}

// stayInNetns enters netns from a thread of its own, creates marker there
// and stays for d. The thread is never given back: it dies with the plugin.
func stayInNetns(netns string, d time.Duration, marker string) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(netns)
		if err != nil {
			done <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("setns %s: %w", netns, err)
			return
		}
		if err := os.WriteFile(marker, nil, 0o600); err != nil {
			done <- err
			return
		}
		time.Sleep(d)
		done <- os.Remove(marker)
	}()
	return <-done
}

func check(args *skel.CmdArgs) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	return record(c, args)
}

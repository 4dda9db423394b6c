package housekeeping

import (
	"time"

	"github.com/nri-housekeeper/nri-housekeeper/bootclock"
	"github.com/nri-housekeeper/nri-housekeeper/config"
	"github.com/nri-housekeeper/nri-housekeeper/gc"
	"github.com/nri-housekeeper/nri-housekeeper/podcgroups"
)

// OptionsFromConfig maps the configuration onto loop options; the caller
// adds Synchronized and Executor.
func OptionsFromConfig(cfg config.Config) Options {
	var cgroups *podcgroups.Options
	if cfg.Cgroups.Enabled {
		cgroups = &podcgroups.Options{Mountpoint: cfg.Cgroups.Mountpoint, Root: cfg.Cgroups.Root, Driver: cfg.Cgroups.Driver}
	}
	return Options{
		Cgroups:         cgroups,
		Period:          cfg.Housekeeping.Period,
		SlowPassWarning: cfg.Housekeeping.SlowPassWarning,
		StartupDelay:    cfg.Housekeeping.StartupDelay,
		OracleDisabled:  cfg.Pods.Source == config.PodsSourceNone,
		KubeletRoot:     cfg.Pods.KubeletRoot,
		StateFile:       cfg.Housekeeping.StateFile,
		BootClock:       bootclock.Read,
		// The plugin's clock and NRI events' times are the wall clock.
		CompareBirthTimes: true,
		Policy: gc.Policy{
			LeakGrace:          cfg.Housekeeping.LeakGrace,
			MinAge:             cfg.Containers.MinAge,
			MaxPerPodContainer: cfg.Containers.MaxPerPodContainer,
			MaxContainers:      cfg.Containers.MaxContainers,
			StopOrphans:        cfg.Orphans.Action == config.OrphansActionStop,
			StopTimeout:        cfg.Orphans.StopTimeout,
			Budget: gc.Budget{MaxPerPass: cfg.Budget.MaxPerPass, MaxFraction: cfg.Budget.MaxFraction,
				MinPerPass: cfg.Budget.MinPerPass, MaxPerHour: cfg.Budget.MaxPerHour},
			OracleSettle:          OracleSettle(cfg.Housekeeping.LeakGrace),
			PodLogsDir:            cfg.Logs.PodLogsDir,
			ContainerLogsDir:      cfg.Logs.ContainerLogsDir,
			RemoveOrphanedPodDirs: cfg.PodDirs.RemoveOrphaned,
			NetworkMinAge:         cfg.Network.MinAge,
		},
	}
}

// maxOracleSettle is the longest a Ready sandbox is left out of the oracle
// check after its creation.
const maxOracleSettle = 10 * time.Second

// OracleSettle is how old a Ready sandbox must be to count when kubelet's
// pod dirs are checked against the runtime: 10 s, or half of leak_grace when
// that is shorter, so that every sandbox counts before any action the oracle
// allowed can be due. (A wholly empty pods dir counts every Ready sandbox at
// once.)
func OracleSettle(leakGrace time.Duration) time.Duration {
	return min(maxOracleSettle, leakGrace/2)
}

// NetworkFromConfig returns the network side of a loop over rt
// ([network]), or nil when network.enabled is false.
func NetworkFromConfig(cfg config.Config, rt NetworkRuntime) *Network {
	if !cfg.Network.Enabled {
		return nil
	}
	return NewNetwork(rt, NetworkOptions{CacheDir: cfg.Network.CacheDir, ConfDir: cfg.Network.ConfDir,
		BinDir: cfg.Network.BinDir, NetnsDir: cfg.Network.NetnsDir, ExecRoot: cfg.Network.ExecRoot})
}

package housekeeping

import (
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
		Policy: gc.Policy{
			LeakGrace:             cfg.Housekeeping.LeakGrace,
			MinAge:                cfg.Containers.MinAge,
			MaxPerPodContainer:    cfg.Containers.MaxPerPodContainer,
			MaxContainers:         cfg.Containers.MaxContainers,
			StopOrphans:           cfg.Orphans.Action == config.OrphansActionStop,
			StopTimeout:           cfg.Orphans.StopTimeout,
			MaxStopsPerPass:       cfg.Orphans.MaxPerPass,
			MaxStopFraction:       cfg.Orphans.MaxFraction,
			PodLogsDir:            cfg.Logs.PodLogsDir,
			ContainerLogsDir:      cfg.Logs.ContainerLogsDir,
			RemoveOrphanedPodDirs: cfg.PodDirs.RemoveOrphaned,
		},
	}
}

package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"golang.org/x/sys/unix"
)

const testSource = "/etc/nri/conf.d/10-nri-housekeeper.conf"

// badConfigs is one bad text per rule: the problem must be reported alone, on
// key at line (0: not in the text), with a message containing msg.
var badConfigs = []struct {
	name string
	text string
	key  string
	line int
	msg  string
}{
	// Unknown keys and sections.
	{"unknown_key", "[housekeeping]\nperod = \"30s\"\n", "housekeeping.perod", 2, "unknown key; did you mean period? (keys of [housekeeping]: period, startup_delay"},
	{"unknown_top_level_key", "dryrun = true\n", "dryrun", 1, "unknown key; did you mean dry_run? (top-level keys: dry_run; sections: housekeeping"},
	{"unknown_top_level_key_like_none", "verbose = true\n", "verbose", 1, "unknown key (top-level keys: dry_run; sections: housekeeping"},
	{"unknown_section", "# comment\n[housekeeper]\nperiod = \"30s\"\n", "housekeeper", 2, "unknown section"},
	{"unknown_subtable", "[housekeeping.extra]\nx = 1\n", "housekeeping.extra", 1, "unknown key"},
	{"key_in_wrong_section", "[nri]\nsocket = \"/run/nri.sock\"\nperiod = \"30s\"\n", "nri.period", 3, "did you mean housekeeping.period?"},
	{"top_level_key_after_section", "[log]\nlevel = \"info\"\ndry_run = true\n", "log.dry_run", 3, "did you mean dry_run? (top-level keys must come before"},
	{"section_key_at_top_level", "max_parallel = 2\n", "max_parallel", 1, "did you mean housekeeping.max_parallel?"},

	// Wrong types.
	{"wrong_type_string_for_int", "[housekeeping]\nmax_parallel = \"4\"\n", "housekeeping.max_parallel", 2, `expected an integer, got string "4": write it without quotes, max_parallel = 4`},
	{"wrong_type_float_for_int", "[budget]\nmax_per_pass = 1.5\n", "budget.max_per_pass", 2, "expected an integer, got float 1.5"},
	{"wrong_type_int_for_duration", "[housekeeping]\nperiod = 30\n", "housekeeping.period", 2, `expected a duration string such as "30s" or "5m", got integer 30`},
	{"wrong_type_string_for_bool", "dry_run = \"yes\"\n", "dry_run", 1, `expected a boolean (true or false), got string "yes"`},
	{"wrong_type_int_for_string", "[nri]\nplugin_index = 10\n", "nri.plugin_index", 2, `expected a string, got integer 10: quote it, plugin_index = "10"`},
	{"wrong_type_string_for_float", "[budget]\nmax_fraction = \"10%\"\n", "budget.max_fraction", 2, `expected a number, got string "10%"`},
	{"wrong_type_array_for_string", "[log]\nlevel = [\"info\"]\n", "log.level", 2, "expected a string, got an array"},
	{"wrong_type_date_for_duration", "[containers]\nmin_age = 1979-05-27\n", "containers.min_age", 2, "got a date/time"},
	{"wrong_type_scalar_for_section", "housekeeping = 5\n", "housekeeping", 1, "expected a table (a [housekeeping] section), got integer 5"},
	{"wrong_type_array_of_tables_for_section", "[[metrics]]\naddress = \"\"\n", "metrics", 1, "expected a table (a [metrics] section), got an array"},

	// Durations.
	{"bad_duration", "[housekeeping]\nperiod = \"5 minutes\"\n", "housekeeping.period", 2, `invalid duration "5 minutes" (use Go duration syntax such as "30s", "5m"; units ns, us, ms, s, m, h)`},
	{"a_string_with_trailing_space", "[runtime]\nendpoint = \"unix:///run/containerd/containerd.sock \"\n", "runtime.endpoint", 2, `"unix:///run/containerd/containerd.sock " starts or ends with white space: remove it`},
	{"a_key_misspelt", "[housekeeping]\nstatefile = \"/x\"\n", "housekeeping.statefile", 2, "unknown key; did you mean state_file? (keys of [housekeeping]:"},
	{"a_key_with_letters_swapped", "[housekeeping]\nperoid = \"5s\"\n", "housekeeping.peroid", 2, "unknown key; did you mean period?"},
	{"a_section_misspelt", "[cgroup]\nenabled = false\n", "cgroup", 1, "unknown section; did you mean cgroups?"},
	{"a_key_like_none", "[logs]\nfoo = 1\n", "logs.foo", 2, "unknown key (keys of [logs]: pod_logs_dir, container_logs_dir)"},
	{"unquoted_duration", "[housekeeping]\nperiod = 30s\n", "housekeeping.period", 2, `a duration is a string: period = "30s" (invalid TOML: expected newline but got U+0073 's')`},
	{"unquoted_compound_duration_with_a_comment", "[housekeeping]\nleak_grace = 1h30m # grace\n", "housekeeping.leak_grace", 2, `a duration is a string: leak_grace = "1h30m" (invalid TOML: `},
	{"duration_out_of_range_is_not_a_syntax_error", "[housekeeping]\nperiod = \"9999999h\"\n", "housekeeping.period", 2,
		`duration "9999999h" is out of range: a Go duration is at most 2562047h47m16.854775807s (about 292 years), either sign; give a shorter one`},
	{"negative_duration_out_of_range_is_not_a_syntax_error", "[orphans]\nstop_timeout = \"-9999999h\"\n", "orphans.stop_timeout", 2, `duration "-9999999h" is out of range`},
	{"duration_of_too_many_nanoseconds_is_out_of_range", "[containers]\nmin_age = \"99999999999999999999ns\"\n", "containers.min_age", 2, `duration "99999999999999999999ns" is out of range`},

	// A word without quotes: the hint comes first, the parser's words (about
	// the number, true, false, nan or inf it tried to read) after it.
	{"unquoted_string_action", "[orphans]\naction = stop\n", "orphans.action", 2, `a string is quoted: action = "stop" (invalid TOML: incomplete number)`},
	{"unquoted_string_target", "[log]\ntarget = file\n", "log.target", 2, `a string is quoted: target = "file" (invalid TOML: expected 'false')`},
	{"unquoted_string_source", "[pods]\nsource = none\n", "pods.source", 2, `a string is quoted: source = "none" (invalid TOML: expected 'nan')`},
	{"unquoted_string_level", "[log]\nlevel = error\n", "log.level", 2, `a string is quoted: level = "error" (invalid TOML: unable to parse float`},
	{"unquoted_string_with_a_comment", "[log]\nlevel = warn # quieter\n", "log.level", 2, `a string is quoted: level = "warn" (invalid TOML: `},
	{"unquoted_string_of_a_dotted_key_as_written", "log.level = info\n", "log.level", 1, `a string is quoted: log.level = "info" (invalid TOML: `},
	{"unquoted_string_path", "[runtime]\nendpoint = /run/containerd/containerd.sock\n", "runtime.endpoint", 2,
		`a string is quoted: endpoint = "/run/containerd/containerd.sock" (invalid TOML: `},
	{"unquoted_string_of_digits", "[nri]\nplugin_index = 05\n", "nri.plugin_index", 2, `a string is quoted: plugin_index = "05" (invalid TOML: `},
	{"boolean_in_upper_case", "dry_run = True\n", "dry_run", 1, `a boolean is true or false, lower case: dry_run = true (invalid TOML: incomplete number)`},
	{"boolean_as_yes", "dry_run = yes\n", "dry_run", 1, `a boolean is true or false, lower case: dry_run = true or dry_run = false (invalid TOML: incomplete number)`},
	{"boolean_as_off_in_a_section", "[cgroups]\nenabled = off\n", "cgroups.enabled", 2, `a boolean is true or false, lower case: enabled = true or enabled = false (invalid TOML: `},

	// A character no message shows, in any string (see also
	// TestEveryStringKeyRefusesACharacterNoMessageShows).
	{"string_with_a_zero_width_space", "[metrics]\naddress = \"127.0.0.1:9560\u200b\"\n", "metrics.address", 2,
		`"127.0.0.1:9560\u200b" contains U+200B, an invisible format character: remove it`},
	{"string_with_a_byte_order_mark", "[log]\nlevel = \"\ufeffinfo\"\n", "log.level", 2, `contains U+FEFF, an invisible format character`},
	{"path_with_a_bidi_override", "[pods]\nkubelet_root = \"/var/lib/\u202ekubelet\"\n", "pods.kubelet_root", 2, `contains U+202E, an invisible format character`},
	{"path_with_a_control_character", "[log]\nfile = \"/var/log/a\\u0007.log\"\n", "log.file", 2, `contains U+0007, a non-printable character: remove it`},
	{"string_with_a_no_break_space_inside", "[nri]\nplugin_name = \"nri\u00a0housekeeper\"\n", "nri.plugin_name", 2, `contains U+00A0, white space other than a plain space: remove it`},
	{"duration_with_a_zero_width_space", "[housekeeping]\nperiod = \"30s\\u200b\"\n", "housekeeping.period", 2, `"30s\u200b" contains U+200B, an invisible format character`},
	{"bad_duration_no_unit", "[orphans]\nstop_timeout = \"10\"\n", "orphans.stop_timeout", 2, `invalid duration "10"`},
	{"bad_duration_empty", "[runtime]\nrpc_timeout = \"\"\n", "runtime.rpc_timeout", 2, `invalid duration ""`},
	{"negative_duration_startup_delay", "[housekeeping]\nstartup_delay = \"-1s\"\n", "housekeeping.startup_delay", 2, `must not be negative, got "-1s"`},
	{"negative_duration_leak_grace", "[housekeeping]\nleak_grace = \"-5m\"\n", "housekeeping.leak_grace", 2, "must not be negative"},
	{"negative_duration_slow_pass_warning", "[housekeeping]\nslow_pass_warning = \"-1ms\"\n", "housekeeping.slow_pass_warning", 2, "must not be negative"},
	{"negative_duration_min_age", "[containers]\nmin_age = \"-1h\"\n", "containers.min_age", 2, "must not be negative"},
	{"negative_duration_stop_timeout", "[orphans]\nstop_timeout = \"-1s\"\n", "orphans.stop_timeout", 2, "must not be negative"},
	{"zero_duration_period", "[housekeeping]\nperiod = \"0s\"\n", "housekeeping.period", 2, `must be at least 1s, got "0s"`},
	{"negative_duration_period", "[housekeeping]\nperiod = \"-30s\"\n", "housekeeping.period", 2, "must be at least 1s"},
	{"period_in_milliseconds_is_a_typo", "[housekeeping]\nperiod = \"30ms\"\nleak_grace = \"5m\"\n", "housekeeping.period", 2, `must be at least 1s, got "30ms": every pass lists every pod`},
	{"zero_duration_rpc_timeout", "[runtime]\nrpc_timeout = \"0\"\n", "runtime.rpc_timeout", 2, "must be at least 1s"},
	{"rpc_timeout_in_milliseconds_is_a_typo", "[runtime]\nrpc_timeout = \"10ms\"\n", "runtime.rpc_timeout", 2, `must be at least 1s, got "10ms": a busy containerd takes longer`},
	{"rpc_timeout_in_hours_is_a_typo", "[runtime]\nrpc_timeout = \"10h\"\n", "runtime.rpc_timeout", 2, `must be at most 10m0s, got "10h0m0s": a containerd that hangs`},
	{"endpoint_of_the_root_dir", "[runtime]\nendpoint = \"unix:///\"\n", "runtime.endpoint", 2, `/ is a directory, not containerd's socket`},
	{"endpoint_with_a_query", "[runtime]\nendpoint = \"unix:///run/containerd/containerd.sock?x=1\"\n", "runtime.endpoint", 2, `gRPC reads it as a URL`},
	{"endpoint_with_a_fragment", "[runtime]\nendpoint = \"/run/containerd/containerd.sock#a\"\n", "runtime.endpoint", 2, `gRPC reads it as a URL`},
	{"endpoint_with_an_escape", "[runtime]\nendpoint = \"unix:///run/a%20b.sock\"\n", "runtime.endpoint", 2, `a % starts an escape`},
	{"endpoint_with_a_trailing_slash_is_not_clean", "[runtime]\nendpoint = \"unix:///run/containerd/containerd.sock/\"\n", "runtime.endpoint", 2,
		`must be a clean path (no trailing /, no // and no . or .. elements), such as "unix:///run/containerd/containerd.sock"; got "unix:///run/containerd/containerd.sock/"`},
	{"endpoint_with_a_double_slash_is_not_clean", "[runtime]\nendpoint = \"/run/containerd//containerd.sock\"\n", "runtime.endpoint", 2,
		`must be a clean path (no trailing /, no // and no . or .. elements), such as "unix:///run/containerd/containerd.sock"; got "unix:///run/containerd//containerd.sock"`},
	{"endpoint_with_a_dot_element_is_not_clean", "[runtime]\nendpoint = \"unix:///run/containerd/./containerd.sock\"\n", "runtime.endpoint", 2,
		`must be a clean path (no trailing /, no // and no . or .. elements), such as "unix:///run/containerd/containerd.sock"`},

	// leak_grace is at least the period (unless one of them is invalid itself).
	{"leak_grace_shorter_than_period", "[housekeeping]\nperiod = \"1m\"\nleak_grace = \"59s\"\n", "housekeeping.leak_grace", 3, `must be at least housekeeping.period (1m0s), got "59s": an object would be acted on the first time a pass sees it`},
	{"leak_grace_zero", "[housekeeping]\nleak_grace = \"0s\"\n", "housekeeping.leak_grace", 2, "use 'nri-housekeeper once --leak-grace 0s'"},
	{"leak_grace_default_shorter_than_period", "[housekeeping]\nperiod = \"10m\"\n", "housekeeping.leak_grace", 0, `must be at least housekeeping.period (10m0s), got "5m0s"`},
	{"leak_grace_not_compared_with_zero_period", "[housekeeping]\nperiod = \"0s\"\nleak_grace = \"0s\"\n", "housekeeping.period", 2, "must be at least 1s"},
	{"leak_grace_negative_not_compared_with_period", "[housekeeping]\nleak_grace = \"-1s\"\n", "housekeeping.leak_grace", 2, "must not be negative"},
	// A period of the wrong type keeps its default (30s), which the user never wrote.
	{"leak_grace_not_compared_with_period_of_wrong_type", "[housekeeping]\nperiod = 10\nleak_grace = \"10s\"\n", "housekeeping.period", 2, `expected a duration string such as "30s"`},
	{"period_not_compared_with_leak_grace_of_wrong_type", "[housekeeping]\nperiod = \"10m\"\nleak_grace = 600\n", "housekeeping.leak_grace", 3, `expected a duration string such as "30s"`},

	// Counts.
	{"state_file_relative", "[housekeeping]\nstate_file = \"state.json\"\n", "housekeeping.state_file", 2, `must be an absolute path, got "state.json"`},
	{"state_file_a_directory", "[housekeeping]\nstate_file = \"/var/lib/nri-housekeeper/\"\n", "housekeeping.state_file", 2,
		`must name a file, not a directory, got "/var/lib/nri-housekeeper/" (such as "/var/lib/nri-housekeeper/state.json")`},
	{"state_file_dot", "[housekeeping]\nstate_file = \"/var/lib/nri-housekeeper/.\"\n", "housekeeping.state_file", 2, `must name a file, not a directory`},
	{"state_file_root", "[housekeeping]\nstate_file = \"/\"\n", "housekeeping.state_file", 2, `must name a file, not a directory`},
	{"log_file_a_directory", "[log]\nfile = \"/var/log/\"\n", "log.file", 2, `must name a file, not a directory, got "/var/log/" (such as "/var/log/nri-housekeeper.log")`},
	{"stop_timeout_above_max", "[orphans]\nstop_timeout = \"11m\"\n", "orphans.stop_timeout", 2, `must be at most 10m0s, got "11m0s": the pass waits for each stop`},
	{"stop_timeout_that_would_overflow", "[orphans]\nstop_timeout = \"2562047h\"\n", "orphans.stop_timeout", 2, `must be at most 10m0s`},
	{"max_parallel_below_1", "[housekeeping]\nmax_parallel = 0\n", "housekeeping.max_parallel", 2, "must be at least 1, got 0"},
	{"max_parallel_above_64", "[housekeeping]\nmax_parallel = 400\n", "housekeeping.max_parallel", 2, "must be at most 64, got 400: more calls in flight only queue inside containerd"},
	{"period_above_a_day", "[housekeeping]\nperiod = \"30h\"\nleak_grace = \"31h\"\n", "housekeeping.period", 2, `must be at most 24h0m0s, got "30h0m0s"`},
	{"kubelet_root_slash", "[pods]\nkubelet_root = \"/\"\n", "pods.kubelet_root", 2, `must not be / (files are removed below it), got "/"`},
	{"kubelet_root_dotdot", "[pods]\nkubelet_root = \"/var/lib/../kubelet\"\n", "pods.kubelet_root", 2, `must not contain ".." elements`},
	{"max_per_pod_container_below_minus_1", "[containers]\nmax_per_pod_container = -2\n", "containers.max_per_pod_container", 2, "must be at least -1, got -2"},
	{"max_containers_below_minus_1", "[containers]\nmax_containers = -2\n", "containers.max_containers", 2, "must be at least -1, got -2"},
	{"max_per_pass_negative", "[budget]\nmax_per_pass = -3\n", "budget.max_per_pass", 2, "must be at least 0, got -3"},
	{"max_fraction_above_1", "[budget]\nmax_fraction = 1.5\n", "budget.max_fraction", 2, "must be between 0 and 1, got 1.5"},
	{"max_fraction_negative", "[budget]\nmax_fraction = -0.1\n", "budget.max_fraction", 2, "must be between 0 and 1, got -0.1"},
	{"max_fraction_nan", "[budget]\nmax_fraction = nan\n", "budget.max_fraction", 2, "must be between 0 and 1, got NaN"},
	{"min_per_pass_negative", "[budget]\nmin_per_pass = -1\n", "budget.min_per_pass", 2, "must be at least 0, got -1"},
	{"max_per_hour_negative", "[budget]\nmax_per_hour = -20\n", "budget.max_per_hour", 2, "must be at least 0, got -20"},

	// min_per_pass is at most max_per_pass (unless one of them is invalid itself).
	{"min_per_pass_above_max_per_pass", "[budget]\nmax_per_pass = 2\nmin_per_pass = 3\n", "budget.min_per_pass", 3, "must be at most budget.max_per_pass (2), got 3: the floor"},
	{"min_per_pass_default_above_max_per_pass", "[budget]\nmax_per_pass = 0\n", "budget.min_per_pass", 0, "must be at most budget.max_per_pass (0), got 1"},
	{"min_per_pass_not_compared_with_negative_max_per_pass", "[budget]\nmax_per_pass = -1\n", "budget.max_per_pass", 2, "must be at least 0, got -1"},
	{"min_per_pass_not_compared_with_max_per_pass_of_wrong_type", "[budget]\nmax_per_pass = \"10\"\nmin_per_pass = 5\n", "budget.max_per_pass", 2, "expected an integer"},

	// Deprecated aliases: validated as their budget key, reported as the key the text used.
	{"alias_max_per_pass_wrong_type", "[orphans]\nmax_per_pass = 1.5\n", "orphans.max_per_pass", 2, "expected an integer, got float 1.5"},
	{"alias_max_per_pass_negative", "[orphans]\nmax_per_pass = -3\n", "orphans.max_per_pass", 2, "must be at least 0, got -3"},
	{"alias_max_fraction_wrong_type", "[orphans]\nmax_fraction = \"10%\"\n", "orphans.max_fraction", 2, `expected a number, got string "10%"`},
	{"alias_max_fraction_above_1", "[orphans]\nmax_fraction = 1.5\n", "orphans.max_fraction", 2, "must be between 0 and 1, got 1.5"},
	{"alias_max_per_pass_below_min_per_pass", "[budget]\nmin_per_pass = 2\n\n[orphans]\nmax_per_pass = 1\n", "budget.min_per_pass", 2, "must be at most orphans.max_per_pass (1), got 2"},
	{"alias_and_current_key_both_set", "[budget]\nmax_per_pass = 3\n[orphans]\nmax_per_pass = 3\n", "orphans.max_per_pass", 4,
		"orphans.max_per_pass is a deprecated alias of budget.max_per_pass; set only budget.max_per_pass"},
	{"alias_and_current_key_both_set_dotted", "orphans.max_fraction = 0.2\nbudget.max_fraction = 0.2\n", "orphans.max_fraction", 1,
		"orphans.max_fraction is a deprecated alias of budget.max_fraction; set only budget.max_fraction"},
	{"alias_in_wrong_section", "[budget]\norphans = 1\n", "budget.orphans", 2, "unknown key"},

	// Enumerations.
	{"unknown_enum_pods_source", "[pods]\nsource = \"kubelet\"\n", "pods.source", 2, `invalid value "kubelet" (expected one of "kubelet-dir", "none")`},
	{"unknown_enum_orphans_action", "[orphans]\naction = \"kill\"\n", "orphans.action", 2, `expected one of "report", "stop"`},
	{"unknown_enum_cgroups_driver", "[cgroups]\ndriver = \"systemd-cgroup\"\n", "cgroups.driver", 2, `expected one of "cgroupfs", "systemd", "auto"`},
	{"unknown_enum_log_level", "[log]\nlevel = \"verbose\"\n", "log.level", 2, `invalid value "verbose"`},
	{"unknown_enum_log_level_case", "[log]\nlevel = \"INFO\"\n", "log.level", 2, `invalid value "INFO"`},
	{"unknown_enum_log_target", "[log]\ntarget = \"syslog\"\n", "log.target", 2, `expected one of "auto", "journald", "stderr", "file"`},

	// log.target = "file" needs log.file.
	{"log_target_file_without_file", "[log]\ntarget = \"file\"\n", "log.file", 2, `must be set to an absolute path when log.target is "file"`},
	{"log_target_file_with_empty_file", "[log]\ntarget = \"file\"\nfile = \"\"\n", "log.file", 3, "must be set to an absolute path"},

	// NRI plugin identity.
	{"plugin_index_one_digit", "[nri]\nplugin_index = \"1\"\n", "nri.plugin_index", 2, `invalid plugin index "1" (expected two decimal digits`},
	{"plugin_index_three_digits", "[nri]\nplugin_index = \"100\"\n", "nri.plugin_index", 2, "invalid plugin index"},
	{"plugin_index_not_digits", "[nri]\nplugin_index = \"1a\"\n", "nri.plugin_index", 2, "invalid plugin index"},
	{"plugin_name_bad_character", "[nri]\nplugin_name = \"nri housekeeper\"\n", "nri.plugin_name", 2, "(use only letters, digits and _ . + -)"},
	{"plugin_name_slash", "[nri]\nplugin_name = \"a/b\"\n", "nri.plugin_name", 2, "invalid plugin name"},
	{"plugin_name_empty", "[nri]\nplugin_name = \"\"\n", "nri.plugin_name", 2, "must not be empty"},

	// Runtime endpoint and namespace.
	{"endpoint_tcp", "[runtime]\nendpoint = \"tcp://127.0.0.1:1234\"\n", "runtime.endpoint", 2, `expected "unix://" followed by an absolute path`},
	{"endpoint_unix_relative", "[runtime]\nendpoint = \"unix://run/containerd.sock\"\n", "runtime.endpoint", 2, "invalid endpoint"},
	{"endpoint_relative_path", "[runtime]\nendpoint = \"run/containerd/containerd.sock\"\n", "runtime.endpoint", 2, "invalid endpoint"},
	{"endpoint_empty", "[runtime]\nendpoint = \"\"\n", "runtime.endpoint", 2, "invalid endpoint"},
	{"namespace_empty", "[runtime]\nnamespace = \"\"\n", "runtime.namespace", 2, "invalid namespace"},
	{"namespace_bad_character", "[runtime]\nnamespace = \"k8s/io\"\n", "runtime.namespace", 2, "invalid namespace"},

	// Absolute paths.
	{"relative_path_kubelet_root", "[pods]\nkubelet_root = \"var/lib/kubelet\"\n", "pods.kubelet_root", 2, `must be an absolute path, got "var/lib/kubelet"`},
	{"relative_path_pod_logs_dir", "[logs]\npod_logs_dir = \"pods\"\n", "logs.pod_logs_dir", 2, "must be an absolute path"},
	{"relative_path_container_logs_dir", "[logs]\ncontainer_logs_dir = \"./containers\"\n", "logs.container_logs_dir", 2, "must be an absolute path"},
	{"relative_path_cgroups_mountpoint", "[cgroups]\nmountpoint = \"sys/fs/cgroup\"\n", "cgroups.mountpoint", 2, "must be an absolute path"},
	{"relative_path_nri_socket", "[nri]\nsocket = \"nri.sock\"\n", "nri.socket", 2, "must be an absolute path"},
	{"endpoint_for_nri_socket", "[nri]\nsocket = \"unix:///var/run/nri/nri.sock\"\n", "nri.socket", 2, `must be an absolute path, got "unix:///var/run/nri/nri.sock": a path, not an endpoint; drop unix:// ("/var/run/nri/nri.sock")`},
	{"relative_path_log_file", "[log]\ntarget = \"file\"\nfile = \"nri-housekeeper.log\"\n", "log.file", 3, "must be an absolute path"},
	{"empty_path_kubelet_root", "[pods]\nkubelet_root = \"\"\n", "pods.kubelet_root", 2, `must be an absolute path, got ""`},
	{"cgroups_root_dotdot", "[cgroups]\nroot = \"../kubepods\"\n", "cgroups.root", 2, "invalid cgroup root"},
	{"relative_path_network_cache_dir", "[network]\ncache_dir = \"var/lib/cni\"\n", "network.cache_dir", 2, "must be an absolute path"},
	{"relative_path_network_netns_dir", "[network]\nnetns_dir = \"run/netns\"\n", "network.netns_dir", 2, "must be an absolute path"},
	{"relative_path_network_exec_root", "[network]\nexec_root = \"proc/1/root\"\n", "network.exec_root", 2, "must be an absolute path"},
	{"cgroups_root_absolute", "[cgroups]\nroot = \"/kubepods\"\n", "cgroups.root", 2, "relative to cgroups.mountpoint"},
	{"cgroups_root_empty", "[cgroups]\nroot = \"\"\n", "cgroups.root", 2, "invalid cgroup root"},
	{"cgroups_root_slice_with_systemd", "[cgroups]\ndriver = \"systemd\"\nroot = \"kubepods.slice\"\n", "cgroups.root", 3, `without ".slice"`},
	{"cgroups_root_underscore_with_systemd", "[cgroups]\ndriver = \"systemd\"\nroot = \"my_pods\"\n", "cgroups.root", 3, "contains '_'"},

	// Metrics address.
	{"metrics_address_no_port", "[metrics]\naddress = \"127.0.0.1\"\n", "metrics.address", 2, `invalid address "127.0.0.1" (expected host:port`},
	{"metrics_address_port_only", "[metrics]\naddress = \"9560\"\n", "metrics.address", 2, "invalid address"},
	{"metrics_address_named_port", "[metrics]\naddress = \"localhost:http\"\n", "metrics.address", 2, "invalid address"},
	{"metrics_address_port_out_of_range", "[metrics]\naddress = \":65536\"\n", "metrics.address", 2, "invalid address"},
	{"metrics_address_empty_port", "[metrics]\naddress = \"localhost:\"\n", "metrics.address", 2, "invalid address"},
	{"metrics_address_host_not_a_name", "[metrics]\naddress = \"not a host:80\"\n", "metrics.address", 2, `invalid address "not a host:80"`},

	// Key forms other than [section] + key.
	{"dotted_key_at_top_level", "dry_run = true\nhousekeeping.period = \"1 m\"\n", "housekeeping.period", 2, "invalid duration"},
	{"inline_table", "\n\nhousekeeping = { max_parallel = 4, period = \"0s\" }\n", "housekeeping.period", 3, "must be at least 1s"},
	{"inline_table_unknown_key", "log = { level = \"info\", colour = true }\n", "log.colour", 1, "unknown key"},
	{"quoted_key", "[\"housekeeping\"]\n\"period\" = \"x\"\n", "housekeeping.period", 2, "invalid duration"},
	{"quoted_unknown_key", "[log]\n\"a b\" = 1\n", `log."a b"`, 2, "unknown key"},
	{"crlf_line_endings", "# x\r\n[housekeeping]\r\n\r\nperiod = \"x\"\r\n", "housekeeping.period", 4, "invalid duration"},
	{"multiline_string_before", "[nri]\nsocket = \"\"\"\n/run/nri/\\\n  nri.sock\"\"\"\nplugin_index = \"7\"\n", "nri.plugin_index", 5, "invalid plugin index"},

	// TOML itself.
	{"toml_syntax_unterminated_string", "[housekeeping]\nperiod = \"5m\n", "housekeeping.period", 2, "invalid TOML: basic strings cannot have new lines"},
	{"toml_syntax_bad_boolean", "# top\n\ndry_run = tru\n", "dry_run", 3, "invalid TOML"},
	{"toml_syntax_unclosed_header", "dry_run = false\n\n[housekeeping\nperiod = \"1s\"\n", "housekeeping", 3, "invalid TOML"},
	{"toml_syntax_missing_value", "[orphans]\naction =\n", "orphans.action", 2, "invalid TOML"},
	{"toml_syntax_garbage_line", "[metrics]\naddress = \"\"\nthis is not toml\n", "metrics", 3, "invalid TOML"},
	{"toml_integer_overflow", "[housekeeping]\nmax_parallel = 99999999999999999999\n", "housekeeping.max_parallel", 2, "out of range"},
	{"toml_duplicate_key", "[housekeeping]\nperiod = \"1s\"\n\nperiod = \"2s\"\n", "housekeeping.period", 4, "invalid TOML: key period is already defined"},
	{"toml_duplicate_section", "[nri]\nplugin_index = \"10\"\n[log]\n[nri]\n", "nri", 4, "invalid TOML: table nri already exists"},
	{"toml_dotted_key_then_table", "log.level = \"info\"\n[log]\ntarget = \"auto\"\n", "log", 2, "invalid TOML"},
}

func TestParseRejectsBadConfigs(t *testing.T) {
	for _, tc := range badConfigs {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.text), testSource)
			if err == nil {
				t.Fatalf("Parse accepted %q: %+v", tc.text, c)
			}
			if !reflect.DeepEqual(c, Config{}) {
				t.Errorf("Parse returned a non-zero Config with an error: %+v", c)
			}
			ps := Problems(err)
			if len(ps) != 1 {
				t.Fatalf("want 1 problem, got %d:\n%v", len(ps), err)
			}
			p := ps[0]
			if p.Key != tc.key || p.Line != tc.line || p.Source != testSource {
				t.Errorf("got source %q line %d key %q, want %q line %d key %q\n%v",
					p.Source, p.Line, p.Key, testSource, tc.line, tc.key, err)
			}
			if !strings.Contains(p.Msg, tc.msg) {
				t.Errorf("message %q does not contain %q", p.Msg, tc.msg)
			}
			var e *Error
			if !errors.As(err, &e) || e != p {
				t.Errorf("errors.As did not find the problem in %v", err)
			}
		})
	}
}

func TestErrorNamesSourceLineAndKey(t *testing.T) {
	text := "# nri-housekeeper\n\ndry_run = false\n\n[housekeeping]\n# how often\nperiod = \"5 minutes\"\n"
	_, err := Parse([]byte(text), testSource)
	want := testSource + `:7: housekeeping.period: invalid duration "5 minutes" (use Go duration syntax such as "30s", "5m"; units ns, us, ms, s, m, h)`
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
}

func TestErrorSaysDefaultForKeysNotInText(t *testing.T) {
	_, err := Parse([]byte("[housekeeping]\nperiod = \"1h\"\n"), "containerd plugin config")
	want := `containerd plugin config:(default): housekeeping.leak_grace: must be at least housekeeping.period (1h0m0s), got "5m0s"`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got  %v\nwant %s...", err, want)
	}
	// A key the text lacks, asked for by one it has: said at that line.
	_, err = Parse([]byte("[log]\ntarget = \"file\"\n"), "containerd plugin config")
	want = `containerd plugin config:2: log.file: must be set to an absolute path when log.target is "file"`
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
}

func TestTextLargerThanMaxSizeIsRejected(t *testing.T) {
	text := "# padding\n" + strings.Repeat("#", MaxSize)
	_, err := Parse([]byte(text), "big.conf")
	want := "big.conf: config text is larger than 65536 bytes"
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
	c, err := Parse([]byte(text[:MaxSize]), "big.conf")
	if err != nil || !reflect.DeepEqual(c, Default()) {
		t.Fatalf("a text of MaxSize bytes: %+v, %v", c, err)
	}

	path := filepath.Join(t.TempDir(), "big.conf")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.HasPrefix(err.Error(), path+": config text is larger") {
		t.Fatalf("Load: %v", err)
	}
}

func TestEmptyTextYieldsDefaults(t *testing.T) {
	for _, text := range []string{"", "\n", "  \n\t\n", "# only a comment\n", "\r\n"} {
		c, err := Parse([]byte(text), "test")
		if err != nil {
			t.Fatalf("Parse(%q): %v", text, err)
		}
		if !reflect.DeepEqual(c, Default()) {
			t.Errorf("Parse(%q) = %+v, want Default()", text, c)
		}
	}
}

func TestByteOrderMarkIsIgnored(t *testing.T) {
	c, err := Parse([]byte("\ufeffdry_run = true\n"), "test")
	if err != nil || !c.DryRun {
		t.Fatalf("got %+v, %v", c, err)
	}
	_, err = Parse([]byte("\ufeff\n[log]\nlevel = \"x\"\n"), "test")
	if ps := Problems(err); len(ps) != 1 || ps[0].Line != 3 {
		t.Fatalf("got %v", err)
	}
}

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestExampleParsesToDefault(t *testing.T) {
	c, err := Parse([]byte(Example()), "example.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Notices != nil {
		t.Errorf("example.toml uses deprecated keys: %q", c.Notices)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("example.toml = %+v\nDefault() = %+v", c, Default())
	}
}

func TestExampleDocumentsEveryKeyWithAComment(t *testing.T) {
	data := []byte(Example())
	s := scan(data)
	lines := strings.Split(string(data), "\n")
	var c Config
	for _, sec := range schema(&c) {
		for _, f := range sec.fields {
			key := sec.key(f.name)
			line, ok := s.lines[key]
			if !ok {
				t.Errorf("example.toml lacks %s", key)
				continue
			}
			if line < 2 || !strings.HasPrefix(lines[line-2], "#") {
				t.Errorf("example.toml: %s (line %d) has no comment above it", key, line)
			}
		}
	}
}

func TestSchemaCoversEveryField(t *testing.T) {
	var c Config
	bound := map[any]bool{}
	for _, sec := range schema(&c) {
		for _, f := range sec.fields {
			bound[f.ptr] = true
		}
	}
	notKeys := map[string]bool{".Notices": true} // set by Parse, not by a key
	var walk func(v reflect.Value, name string)
	walk = func(v reflect.Value, name string) {
		if notKeys[name] {
			return
		}
		if v.Kind() == reflect.Struct {
			for i := range v.NumField() {
				walk(v.Field(i), name+"."+v.Type().Field(i).Name)
			}
			return
		}
		if !bound[v.Addr().Interface()] {
			t.Errorf("field Config%s has no TOML key in schema", name)
		}
	}
	walk(reflect.ValueOf(&c).Elem(), "")
}

// fullConfig sets every key to a value that differs from its default.
const fullConfig = `
dry_run = true

[housekeeping]
period = "1m"
startup_delay = "0s"
leak_grace = "10m"
slow_pass_warning = "0s"
max_parallel = 8
state_file = "/data/nri-housekeeper/state.json"

[nri]
socket = "/run/nri/nri.sock"
plugin_name = "housekeeper.test+1"
plugin_index = "05"

[runtime]
endpoint = "unix:///var/run/containerd/containerd.sock"
namespace = "k8s-test"
rpc_timeout = "2.5s"

[pods]
source = "none"
kubelet_root = "/data/kubelet"

[containers]
min_age = "1h"
max_per_pod_container = 0
max_containers = 100

[orphans]
action = "stop"
stop_timeout = "30s"

[budget]
max_per_pass = 7
max_fraction = 1 # an integer is accepted for a float
min_per_pass = 0
max_per_hour = 100

[logs]
pod_logs_dir = "/data/log/pods"
container_logs_dir = "/data/log/containers"

[cgroups]
enabled = false
driver = "systemd"
mountpoint = "/mnt/cgroup"
root = "custom/kubepods"

[pod_dirs]
remove_orphaned = true

[network]
enabled = false
cache_dir = "/data/cni"
conf_dir = "/data/cni/net.d"
bin_dir = "/data/cni/bin"
netns_dir = "/run/containerd/netns"
exec_root = "/proc/1/root"
min_age = "90s"

[metrics]
address = ""

[log]
level = "warning"
target = "file"
file = "/var/log/nri-housekeeper.log"
`

var fullConfigWant = Config{
	DryRun: true,
	Housekeeping: Housekeeping{
		Period:          time.Minute,
		StartupDelay:    0,
		LeakGrace:       10 * time.Minute,
		SlowPassWarning: 0,
		MaxParallel:     8,
		StateFile:       "/data/nri-housekeeper/state.json",
	},
	NRI:        NRI{Socket: "/run/nri/nri.sock", PluginName: "housekeeper.test+1", PluginIndex: "05"},
	Runtime:    Runtime{Endpoint: "unix:///var/run/containerd/containerd.sock", Namespace: "k8s-test", RPCTimeout: 2500 * time.Millisecond},
	Pods:       Pods{Source: PodsSourceNone, KubeletRoot: "/data/kubelet"},
	Containers: Containers{MinAge: time.Hour, MaxPerPodContainer: 0, MaxContainers: 100},
	Orphans:    Orphans{Action: OrphansActionStop, StopTimeout: 30 * time.Second},
	Budget:     Budget{MaxPerPass: 7, MaxFraction: 1, MinPerPass: 0, MaxPerHour: 100},
	Logs:       Logs{PodLogsDir: "/data/log/pods", ContainerLogsDir: "/data/log/containers"},
	Cgroups:    Cgroups{Enabled: false, Driver: DriverSystemd, Mountpoint: "/mnt/cgroup", Root: "custom/kubepods"},
	PodDirs:    PodDirs{RemoveOrphaned: true},
	Network:    Network{CacheDir: "/data/cni", ConfDir: "/data/cni/net.d", BinDir: "/data/cni/bin", NetnsDir: "/run/containerd/netns", ExecRoot: "/proc/1/root", MinAge: 90 * time.Second},
	Metrics:    Metrics{Address: ""},
	Log:        Log{Level: LevelWarning, Target: TargetFile, File: "/var/log/nri-housekeeper.log"},
}

func TestEveryKeyCanBeSet(t *testing.T) {
	// The expectation must differ from Default() in every field, or a key
	// that is silently ignored would go unnoticed.
	want, def := reflect.ValueOf(fullConfigWant), reflect.ValueOf(Default())
	for i := range want.NumField() {
		w, d := want.Field(i), def.Field(i)
		if want.Type().Field(i).Name == "Notices" { // not a key
			continue
		}
		if w.Kind() != reflect.Struct {
			if w.Equal(d) {
				t.Errorf("fullConfig leaves %s at its default", want.Type().Field(i).Name)
			}
			continue
		}
		for j := range w.NumField() {
			if w.Field(j).Equal(d.Field(j)) {
				t.Errorf("fullConfig leaves %s.%s at its default", want.Type().Field(i).Name, w.Type().Field(j).Name)
			}
		}
	}

	c, err := Parse([]byte(fullConfig), "full")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, fullConfigWant) {
		t.Errorf("got  %+v\nwant %+v", c, fullConfigWant)
	}
}

func TestKeysMayUseDottedKeysAndInlineTables(t *testing.T) {
	text := `dry_run = true
housekeeping.period = "1m"
housekeeping.max_parallel = 2
nri = { plugin_index = "20", plugin_name = "hk" }
[log]
level = "debug"
`
	c, err := Parse([]byte(text), "test")
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.DryRun = true
	want.Housekeeping.Period = time.Minute
	want.Housekeeping.MaxParallel = 2
	want.NRI.PluginIndex = "20"
	want.NRI.PluginName = "hk"
	want.Log.Level = LevelDebug
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
}

func TestBareEndpointPathIsNormalised(t *testing.T) {
	c, err := Parse([]byte("[runtime]\nendpoint = \"/run/k3s/containerd/containerd.sock\"\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	if want := "unix:///run/k3s/containerd/containerd.sock"; c.Runtime.Endpoint != want {
		t.Errorf("endpoint = %q, want %q", c.Runtime.Endpoint, want)
	}
}

func TestMultipleProblemsAreAllReported(t *testing.T) {
	text := `dry_run = "no"
unknown_top = 1

[housekeeping]
period = "5 minutes"
max_parallel = 0
leak_grace = 300

[nri]
plugin_index = "7"
period = "30s"

[pods]
kubelet_root = "relative/kubelet"

[bogus]
x = 1

[orphans]
action = "destroy"
max_fraction = 2.0

[log]
target = "file"
`
	_, err := Parse([]byte(text), testSource)
	type where struct {
		line int
		key  string
	}
	want := []where{
		{1, "dry_run"},
		{2, "unknown_top"},
		{5, "housekeeping.period"},
		{6, "housekeeping.max_parallel"},
		{7, "housekeeping.leak_grace"},
		{10, "nri.plugin_index"},
		{11, "nri.period"},
		{14, "pods.kubelet_root"},
		{16, "bogus"},
		{20, "orphans.action"},
		{21, "orphans.max_fraction"},
		{24, "log.file"},
	}
	ps := Problems(err)
	var got []where
	for _, p := range ps {
		got = append(got, where{p.Line, p.Key})
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got problems %v\nwant %v\nerror:\n%v", got, want, err)
	}
	// One line of text per problem, in the same order.
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(ps) {
		t.Fatalf("error has %d lines, want %d:\n%v", len(lines), len(ps), err)
	}
	for i, p := range ps {
		if lines[i] != p.Error() {
			t.Errorf("line %d = %q, want %q", i, lines[i], p.Error())
		}
	}
	var e *Error
	if !errors.As(err, &e) || e.Key != "dry_run" {
		t.Errorf("errors.As found %v, want the dry_run problem", e)
	}
}

func TestDeprecatedOrphansKeysSetTheBudgetWithANotice(t *testing.T) {
	const why = " (the budget now limits every class of destructive step, not only orphan stops)"
	for _, tc := range []struct {
		name    string
		text    string
		want    Budget
		notices []string
	}{
		{"no deprecated key", "[budget]\nmax_per_pass = 5\n",
			Budget{MaxPerPass: 5, MaxFraction: 0.1, MinPerPass: 1, MaxPerHour: 20}, nil},
		{"orphans.max_per_pass", "[orphans]\naction = \"stop\"\nmax_per_pass = 5\n",
			Budget{MaxPerPass: 5, MaxFraction: 0.1, MinPerPass: 1, MaxPerHour: 20},
			[]string{testSource + ":3: orphans.max_per_pass is deprecated: use budget.max_per_pass" + why}},
		{"orphans.max_fraction", "orphans.max_fraction = 0.5\n",
			Budget{MaxPerPass: 3, MaxFraction: 0.5, MinPerPass: 1, MaxPerHour: 20},
			[]string{testSource + ":1: orphans.max_fraction is deprecated: use budget.max_fraction" + why}},
		{"both, in line order, with the other budget keys", "[orphans]\nmax_fraction = 1\nmax_per_pass = 0\n\n[budget]\nmin_per_pass = 0\nmax_per_hour = 2\n",
			Budget{MaxPerPass: 0, MaxFraction: 1, MinPerPass: 0, MaxPerHour: 2},
			[]string{
				testSource + ":2: orphans.max_fraction is deprecated: use budget.max_fraction" + why,
				testSource + ":3: orphans.max_per_pass is deprecated: use budget.max_per_pass" + why,
				testSource + ":3: orphans.max_per_pass = 0 disables every budgeted step: no orphan stop, UNKNOWN container stop, cgroup kill or CPU reduction, " +
					"pod dir or pod log dir removal, and no network step is taken (each is held, and no class trips)",
			}},
		{"an inline table", "orphans = { max_per_pass = 4 }\n",
			Budget{MaxPerPass: 4, MaxFraction: 0.1, MinPerPass: 1, MaxPerHour: 20},
			[]string{testSource + ":1: orphans.max_per_pass is deprecated: use budget.max_per_pass" + why}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.text), testSource)
			if err != nil {
				t.Fatal(err)
			}
			if c.Budget != tc.want {
				t.Errorf("budget = %+v, want %+v", c.Budget, tc.want)
			}
			if !reflect.DeepEqual(c.Notices, tc.notices) {
				t.Errorf("notices = %q\nwant %q", c.Notices, tc.notices)
			}
		})
	}
}

func TestAliasesMapOldKeysOutsideTheSchemaToKeysInIt(t *testing.T) {
	var c Config
	secs := schema(&c)
	keys := map[string]bool{}
	for _, sec := range secs {
		for _, f := range sec.fields {
			keys[sec.key(f.name)] = true
		}
	}
	for _, a := range aliases() {
		if keys[a.old] || !keys[a.current] {
			t.Errorf("alias %s -> %s: the old key must not be in the schema, the current one must", a.old, a.current)
		}
	}
}

func TestValidateReportsWithoutSourceOrLine(t *testing.T) {
	c := Default()
	c.Housekeeping.Period = 0
	c.Runtime.Endpoint = "/run/containerd/containerd.sock" // only Parse normalises
	err := c.Validate()
	ps := Problems(err)
	if len(ps) != 2 {
		t.Fatalf("want 2 problems, got %v", err)
	}
	if got, want := ps[0].Error(), `housekeeping.period: must be at least 1s, got "0s": every pass lists every pod and reads the node's pod dirs and cgroups: `+
		`a typo such as "30ms" for "30s" would do that dozens of times a second; use e.g. "30s"`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if ps[1].Key != "runtime.endpoint" || ps[1].Source != "" || ps[1].Line != 0 {
		t.Errorf("got %+v", ps[1])
	}
}

func TestValidateAcceptsBoundaryValues(t *testing.T) {
	c := Default()
	c.Housekeeping.StartupDelay = 0
	c.Housekeeping.LeakGrace = c.Housekeeping.Period
	c.Housekeeping.SlowPassWarning = 0
	c.Housekeeping.MaxParallel = 1
	c.Containers.MaxPerPodContainer = 0
	c.Containers.MaxContainers = -1
	c.Orphans.StopTimeout = 0
	c.Budget.MaxPerPass = 0
	c.Budget.MaxFraction = 0
	c.Budget.MinPerPass = 0
	c.Budget.MaxPerHour = 0
	c.Metrics.Address = ""
	c.Log.Level = LevelWarn
	c.Log.File = "/var/log/x.log" // a file without target "file" is allowed
	c.NRI.PluginIndex = "00"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Budget.MaxFraction = 1
	c.Budget.MinPerPass = 3 // = MaxPerPass
	c.Budget.MaxPerPass = 3
	c.Metrics.Address = "[::1]:0"
	c.NRI.PluginIndex = "99"
	c.Orphans.StopTimeout = MaxStopTimeout
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"localhost:9560", "node-1.example.com:9560", ":9560", "0.0.0.0:9560", "[fe80::1%eth0]:9560"} {
		c.Metrics.Address = addr
		if err := c.Validate(); err != nil {
			t.Errorf("metrics.address %q: %v", addr, err)
		}
	}
}

func TestProblemsOfNonConfigErrorIsEmpty(t *testing.T) {
	if ps := Problems(errors.New("x")); ps != nil {
		t.Errorf("got %v", ps)
	}
	if ps := Problems(nil); ps != nil {
		t.Errorf("got %v", ps)
	}
}

func TestLoadMissingFileNamesPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.conf")
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %v does not name %s", err, path)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %v is not fs.ErrNotExist", err)
	}
}

// TestDeeplyNestedKeysAreReportedAtOnce: recording the line of every
// prefix of every key made inline tables nested 4,000 deep (16 KB, well
// under MaxSize) take minutes; nested dotted keys too.
func TestDeeplyNestedKeysAreReportedAtOnce(t *testing.T) {
	const depth = 4000
	for _, tc := range []struct{ name, text, want string }{
		{"inline tables", "[log]\nx = " + strings.Repeat("{a=", depth) + "1" + strings.Repeat("}", depth) + "\n", testSource + ":2: log.x: unknown key"},
		{"a dotted key", "[log]\nx." + strings.Repeat("a.", depth) + "b = 1\n", testSource + ":2: log.x: unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := Parse([]byte(tc.text), testSource)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want %q", err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Parse still running after 10s")
			}
		})
	}
}

// TestLoadReadsAPipeAWriterFills: `--config <(...)` and /dev/stdin are
// pipes; their text is read to the writer's end.
func TestLoadReadsAPipeAWriterFills(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() {
		_, _ = w.WriteString("dry_run = true\n")
		w.Close()
	}()
	path := fmt.Sprintf("/proc/self/fd/%d", r.Fd())
	c, err := Load(path)
	if err != nil || !c.DryRun {
		t.Fatalf("Load(%s) = dry_run %v, %v; want the pipe's text", path, c.DryRun, err)
	}
}

// TestLoadWaitsForAFIFOsWriter: a FIFO's writer may open it after the
// plugin does (mkfifo f; write-config > f & run --config f); a read found
// the end of the pipe at once, and the writer then blocked for ever.
func TestLoadWaitsForAFIFOsWriter(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "late.conf")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		wrote <- os.WriteFile(fifo, []byte("dry_run = true\n"), 0o600)
	}()
	c, err := Load(fifo)
	if err != nil || !c.DryRun {
		t.Fatalf("Load(%s) = dry_run %v, %v; want the late writer's text", fifo, c.DryRun, err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the writer: %v", err)
	}
}

func TestLoadRefusesWhatIsNotARegularFileOrAFilledPipe(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.conf")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, want string }{
		// A FIFO with no writer blocked the open, and the start, for ever.
		{"a FIFO with no writer", fifo, fifo + " is a pipe that gave no configuration text within 1s (no writer"},
		{"a directory", dir, dir + " is a directory, not a regular file"},
		// A device that never ends would be read up to the size limit.
		{"a character device", "/dev/zero", "/dev/zero is a character device, not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := load(tc.path, time.Second)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Load(%s) = %v, want an error with %q", tc.path, err, tc.want)
				}
			case <-time.After(5 * time.Second):
				// Let the blocked open go, so that the test binary can end.
				if w, err := os.OpenFile(tc.path, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
				t.Fatalf("Load(%s) was still blocked after 5s", tc.path)
			}
		})
	}
}

func TestLoadUsesPathAsSource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "10-nri-housekeeper.conf")
	if err := os.WriteFile(path, []byte("[metrics]\naddress = \"nope\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+":2: metrics.address: ") {
		t.Fatalf("got %v", err)
	}

	if err := os.WriteFile(path, []byte(fullConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil || !reflect.DeepEqual(c, fullConfigWant) {
		t.Fatalf("Load = %+v, %v", c, err)
	}
}

func FuzzParse(f *testing.F) {
	// The keys whose default value can fail a rule that compares it with
	// another key.
	canFailAsDefault := map[string]bool{"log.file": true, "housekeeping.leak_grace": true, "budget.min_per_pass": true}
	f.Add([]byte(Example()))
	f.Add([]byte(fullConfig))
	for _, tc := range badConfigs {
		f.Add([]byte(tc.text))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz")
		if err == nil {
			// What was taken, written back as TOML under the current
			// keys, reads the same: no value is read into a key other
			// than its own, changed on the way, or taken only in the
			// spelling it came in.
			again, err := Parse(render(t, c), "fuzz")
			c.Notices, again.Notices = nil, nil
			if err != nil || !reflect.DeepEqual(c, again) {
				t.Fatalf("Parse took %+v, which written back reads as %+v, %v", c, again, err)
			}
			return
		}
		ps := Problems(err)
		if len(ps) == 0 {
			t.Fatalf("error without problems: %v", err)
		}
		lines := bytes.Count(data, []byte("\n")) + 1
		for _, p := range ps {
			if p.Source != "fuzz" || p.Msg == "" || p.Line < 0 || p.Line > lines {
				t.Fatalf("bad problem %+v in %d lines", p, lines)
			}
			// Only a default value can lack a line; the defaults that can
			// fail are those checked against another key: log.file (when
			// log.target is "file"), housekeeping.leak_grace (against the
			// period) and budget.min_per_pass (against max_per_pass). A text
			// too large is the one problem about no key.
			if p.Line == 0 && !canFailAsDefault[p.Key] && !(p.Key == "" && len(data) > MaxSize) {
				t.Fatalf("problem without line: %+v", p)
			}
		}
	})
}

// render writes c as TOML, every key of the schema under its current name
// (durations in Go's syntax, as the keys take them).
func render(t *testing.T, c Config) []byte {
	doc := map[string]any{}
	for _, sec := range schema(&c) {
		table := doc
		if sec.name != "" {
			table = map[string]any{}
			doc[sec.name] = table
		}
		for _, f := range sec.fields {
			switch p := f.ptr.(type) {
			case *bool:
				table[f.name] = *p
			case *int:
				table[f.name] = *p
			case *float64:
				table[f.name] = *p
			case *string:
				table[f.name] = *p
			case *time.Duration:
				table[f.name] = p.String()
			default:
				t.Fatalf("schema field %s has type %T", sec.key(f.name), f.ptr)
			}
		}
	}
	out, err := toml.Marshal(doc)
	if err != nil {
		t.Fatalf("render %+v: %v", c, err)
	}
	return out
}

// The hint to quote a duration is given for duration keys only: quoted,
// max_per_pass = "3m" would be a type error next.
func TestAnUnquotedValueOfAnotherKeyGetsNoDurationHint(t *testing.T) {
	_, err := Parse([]byte("[budget]\nmax_per_pass = 3m\n"), testSource)
	if err == nil || !strings.Contains(err.Error(), "budget.max_per_pass: invalid TOML") || strings.Contains(err.Error(), "a duration is a string") {
		t.Fatalf("err = %v; want the TOML error at budget.max_per_pass, with no duration hint", err)
	}
}

// TestEveryStringKeyRefusesACharacterNoMessageShows: a zero width space
// pasted into a value (or a U+FEFF, a bidi control) is invisible in every
// message that quotes the value later ("no such file"), so it is refused
// at its key, naming its code point, whatever the key.
func TestEveryStringKeyRefusesACharacterNoMessageShows(t *testing.T) {
	def := Default()
	for _, sec := range schema(&def) {
		for _, f := range sec.fields {
			var v string
			switch p := f.ptr.(type) {
			case *string:
				v = *p
			case *time.Duration:
				v = p.String()
			default:
				continue
			}
			key := sec.key(f.name)
			t.Run(key, func(t *testing.T) {
				text := "[" + sec.name + "]\n" + f.name + " = \"" + v + "\u200b\"\n"
				_, err := Parse([]byte(text), testSource)
				ps := Problems(err)
				if len(ps) != 1 || ps[0].Key != key || ps[0].Line != 2 || !strings.Contains(ps[0].Msg, "contains U+200B, an invisible format character") {
					t.Fatalf("%q: got %v; want one problem at %s, line 2, naming U+200B", text, err, key)
				}
			})
		}
	}
}

// TestAWordOfAScriptThatJoinsWithZeroWidthCharactersIsKept: the zero-width
// non-joiner and joiner are letters' business in Persian and Indic words,
// not a paste's leftover: a path spelled with them is taken as written.
func TestAWordOfAScriptThatJoinsWithZeroWidthCharactersIsKept(t *testing.T) {
	for _, dir := range []string{"/var/log/نیم\u200cفاصله", "/var/log/क्\u200dष"} {
		c, err := Parse([]byte(fmt.Sprintf("[logs]\npod_logs_dir = %q\n", dir)), "zw.toml")
		if err != nil || c.Logs.PodLogsDir != dir {
			t.Errorf("pod_logs_dir = %q: %v, got %q", dir, err, c.Logs.PodLogsDir)
		}
	}
}

// TestMaxPerPodContainerMinusOneIsKubeletsNoLimit: kubelet's
// --maximum-dead-containers-per-container=-1 keeps every dead instance; a
// node set so could not be matched while -1 was refused.
func TestMaxPerPodContainerMinusOneIsKubeletsNoLimit(t *testing.T) {
	c, err := Parse([]byte("[containers]\nmax_per_pod_container = -1\n"), "test.toml")
	if err != nil {
		t.Fatalf("max_per_pod_container = -1: %v, want it accepted (kubelet's no limit)", err)
	}
	if c.Containers.MaxPerPodContainer != -1 {
		t.Fatalf("max_per_pod_container = %d, want -1", c.Containers.MaxPerPodContainer)
	}
}

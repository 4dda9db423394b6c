package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// field is one key of the schema, bound to the Config field it sets.
type field struct {
	name string
	ptr  any // *bool, *int, *float64, *string or *time.Duration (a duration string)
}

// section is one table of the schema; name is "" for the top-level keys.
type section struct {
	name   string
	fields []field
}

// schema lists every TOML key, bound to the fields of c. It is the only place
// that maps keys to fields.
func schema(c *Config) []section {
	return []section{
		{"", []field{
			{"dry_run", &c.DryRun},
		}},
		{"housekeeping", []field{
			{"period", &c.Housekeeping.Period},
			{"startup_delay", &c.Housekeeping.StartupDelay},
			{"leak_grace", &c.Housekeeping.LeakGrace},
			{"slow_pass_warning", &c.Housekeeping.SlowPassWarning},
			{"max_parallel", &c.Housekeeping.MaxParallel},
			{"state_file", &c.Housekeeping.StateFile},
		}},
		{"nri", []field{
			{"socket", &c.NRI.Socket},
			{"plugin_name", &c.NRI.PluginName},
			{"plugin_index", &c.NRI.PluginIndex},
		}},
		{"runtime", []field{
			{"endpoint", &c.Runtime.Endpoint},
			{"namespace", &c.Runtime.Namespace},
			{"rpc_timeout", &c.Runtime.RPCTimeout},
		}},
		{"pods", []field{
			{"source", &c.Pods.Source},
			{"kubelet_root", &c.Pods.KubeletRoot},
		}},
		{"containers", []field{
			{"min_age", &c.Containers.MinAge},
			{"max_per_pod_container", &c.Containers.MaxPerPodContainer},
			{"max_containers", &c.Containers.MaxContainers},
		}},
		{"orphans", []field{
			{"action", &c.Orphans.Action},
			{"stop_timeout", &c.Orphans.StopTimeout},
		}},
		{"budget", []field{
			{"max_per_pass", &c.Budget.MaxPerPass},
			{"max_fraction", &c.Budget.MaxFraction},
			{"min_per_pass", &c.Budget.MinPerPass},
			{"max_per_hour", &c.Budget.MaxPerHour},
		}},
		{"logs", []field{
			{"pod_logs_dir", &c.Logs.PodLogsDir},
			{"container_logs_dir", &c.Logs.ContainerLogsDir},
		}},
		{"cgroups", []field{
			{"enabled", &c.Cgroups.Enabled},
			{"driver", &c.Cgroups.Driver},
			{"mountpoint", &c.Cgroups.Mountpoint},
			{"root", &c.Cgroups.Root},
		}},
		{"pod_dirs", []field{
			{"remove_orphaned", &c.PodDirs.RemoveOrphaned},
		}},
		{"network", []field{
			{"enabled", &c.Network.Enabled},
			{"cache_dir", &c.Network.CacheDir},
			{"conf_dir", &c.Network.ConfDir},
			{"bin_dir", &c.Network.BinDir},
			{"netns_dir", &c.Network.NetnsDir},
			{"exec_root", &c.Network.ExecRoot},
			{"min_age", &c.Network.MinAge},
		}},
		{"metrics", []field{
			{"address", &c.Metrics.Address},
		}},
		{"log", []field{
			{"level", &c.Log.Level},
			{"target", &c.Log.Target},
			{"file", &c.Log.File},
		}},
	}
}

// alias is a deprecated key that a text may still use instead of its
// current key.
type alias struct {
	old, current string // full dotted keys
	why          string // why the key changed, for the notice
}

// aliases lists the deprecated keys. The value of an old key is decoded into
// the field of its current key and validated as that key, but its problems
// name the old key; a text may set only one of the two; and every use of an
// old key adds a notice to Config.Notices.
func aliases() []alias {
	const budget = "the budget now limits every class of destructive step, not only orphan stops"
	return []alias{
		{"orphans.max_per_pass", "budget.max_per_pass", budget},
		{"orphans.max_fraction", "budget.max_fraction", budget},
	}
}

// aliasOf returns the alias whose old key is key.
func aliasOf(key string) (alias, bool) {
	for _, a := range aliases() {
		if a.old == key {
			return a, true
		}
	}
	return alias{}, false
}

// fieldOf returns the field of the full dotted key of secs.
func fieldOf(secs []section, key string) field {
	for _, s := range secs {
		for _, f := range s.fields {
			if s.key(f.name) == key {
				return f
			}
		}
	}
	panic("config: no schema field for " + key)
}

func (s section) field(name string) (field, bool) {
	for _, f := range s.fields {
		if f.name == name {
			return f, true
		}
	}
	return field{}, false
}

func (s section) key(name string) string {
	if s.name == "" {
		return name
	}
	return s.name + "." + name
}

func (s section) names() string {
	var names []string
	for _, f := range s.fields {
		names = append(names, f.name)
	}
	return strings.Join(names, ", ")
}

// decoder decodes one text into a Config, collecting its problems and the
// notices of the deprecated keys it uses.
type decoder struct {
	problems
	notices []*Error // formatted like problems, without a key
}

// decode decodes data into c. It returns false if data is not valid TOML; the
// problem is then recorded and c is left untouched.
//
// The text is decoded in three steps: go-toml checks the TOML (syntax,
// redefined keys) while decoding into a generic map; the unstable parser
// gives the line of every key; the map is then checked against the schema,
// so that every unknown key and wrong type is reported, not just the first.
func (d *decoder) decode(data []byte, c *Config) bool {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		d.tomlError(data, err)
		return false
	}
	s := scan(data)
	if s.err != nil { // not expected: go-toml accepted the same text
		d.addAt(0, "", "invalid TOML: %v", s.err)
		return false
	}
	d.lines = s.lines

	secs := schema(c)
	top := secs[0]
	for name, v := range doc {
		key := dotted(name)
		if f, ok := top.field(name); ok {
			d.set(key, f, v)
			continue
		}
		i := slices.IndexFunc(secs[1:], func(s section) bool { return s.name == name })
		if i < 0 {
			d.unknown(secs, top, name, v)
			continue
		}
		sec := secs[1+i]
		table, ok := v.(map[string]any)
		if !ok {
			d.add(key, "expected a table (a [%s] section), got %s", name, describe(v))
			continue
		}
		for k, v := range table {
			if f, ok := sec.field(k); ok {
				d.set(sec.key(k), f, v)
			} else if a, ok := aliasOf(sec.key(k)); ok {
				d.setAlias(secs, a, v)
			} else {
				d.unknown(secs, sec, k, v)
			}
		}
	}
	slices.SortStableFunc(d.notices, func(a, b *Error) int { return a.Line - b.Line })
	for _, n := range d.notices {
		c.Notices = append(c.Notices, n.Error())
	}
	return true
}

// setAlias stores v, the value of the deprecated key a.old, in the field of
// a.current and records a notice. From then on the problems of a.current
// name a.old (see problems.name).
func (d *decoder) setAlias(secs []section, a alias, v any) {
	if _, both := d.lines[a.current]; both {
		d.add(a.old, "%s is a deprecated alias of %s; set only %s", a.old, a.current, a.current)
		return
	}
	d.set(a.old, fieldOf(secs, a.current), v)
	if d.aliased == nil {
		d.aliased = map[string]string{}
	}
	d.aliased[a.current] = a.old
	d.notices = append(d.notices, &Error{
		Source: d.source,
		Line:   d.lines[a.old],
		Msg:    fmt.Sprintf("%s is deprecated: use %s (%s)", a.old, a.current, a.why),
	})
}

// keepOldMeaning keeps a text written for the old breaker loading: an
// orphans.max_per_pass below budget.min_per_pass (its default 1, the text
// not setting it) would fail validation, so the floor follows it down and a
// notice says what that now means. orphans.max_per_pass = 0 meant "stop no
// orphan"; as budget.max_per_pass = 0 with min_per_pass = 0 it takes no
// budgeted step of any class, which is the safe side of the old meaning.
func (d *decoder) keepOldMeaning(c *Config) {
	old, aliased := d.aliased["budget.max_per_pass"]
	if _, set := d.lines["budget.min_per_pass"]; !aliased || set || c.Budget.MaxPerPass < 0 || c.Budget.MinPerPass <= c.Budget.MaxPerPass {
		return
	}
	c.Budget.MinPerPass = c.Budget.MaxPerPass
	d.budgetNoted = true
	c.Notices = append(c.Notices, (&Error{Source: d.source, Line: d.lines[old],
		Msg: fmt.Sprintf("%s = %d is below budget.min_per_pass's default: budget.min_per_pass is set to %d too, so a pass takes at most %d step(s) of every budgeted class "+
			"(orphan stops, UNKNOWN container stops, cgroup kills and CPU reductions, pod dir and pod log dir removals, the network's steps); "+
			"to only never stop orphans, set orphans.action = \"report\"", old, c.Budget.MaxPerPass, c.Budget.MaxPerPass, c.Budget.MaxPerPass)}).Error())
}

// noteDisabledBudget says, where the cap is set to 0, that every budgeted
// step is disabled: it is a choice, so no class trips, and nothing else
// would say it above debug level.
func (d *decoder) noteDisabledBudget(c *Config) {
	if d.budgetNoted {
		return // keepOldMeaning said what the old key's 0 means
	}
	for _, key := range []string{"budget.max_per_pass", "budget.max_per_hour", "budget.max_fraction"} {
		zero, with := false, ""
		switch key {
		case "budget.max_per_pass":
			zero = c.Budget.MaxPerPass == 0
		case "budget.max_per_hour":
			zero = c.Budget.MaxPerHour == 0
		case "budget.max_fraction":
			// With no floor, 0 a pass on every node, whatever its size.
			zero, with = c.Budget.MaxFraction == 0 && c.Budget.MinPerPass == 0, " with budget.min_per_pass = 0"
		}
		if !zero {
			continue
		}
		name, line := key, d.lines[key]
		if old, aliased := d.aliased[key]; aliased {
			name, line = old, d.lines[old]
		}
		c.Notices = append(c.Notices, (&Error{Source: d.source, Line: line,
			Msg: fmt.Sprintf("%s = 0%s disables every budgeted step: no orphan stop, UNKNOWN container stop, cgroup kill or CPU reduction, "+
				"pod dir or pod log dir removal, and no network step is taken (each is held, and no class trips)", name, with)}).Error())
		return
	}
}

// unknown records name, found in section in, as an unknown key or section,
// with a hint when the name belongs elsewhere.
func (d *decoder) unknown(secs []section, in section, name string, v any) {
	key := dotted(name)
	if in.name != "" {
		key = dotted(in.name, name)
	}
	var elsewhere []string
	for _, s := range secs {
		if _, ok := s.field(name); ok && s.name != in.name {
			elsewhere = append(elsewhere, s.key(name))
		}
	}
	switch {
	case len(elsewhere) > 0 && elsewhere[0] == "dry_run":
		d.add(key, "unknown key; did you mean dry_run? (top-level keys must come before the first [section] header)")
	case len(elsewhere) > 0:
		d.add(key, "unknown key; did you mean %s? (a key belongs to the [section] header above it)", strings.Join(elsewhere, " or "))
	case in.name != "":
		var names []string
		for _, f := range in.fields {
			names = append(names, f.name)
		}
		d.add(key, "unknown key%s (keys of [%s]: %s)", didYouMean(name, names), in.name, in.names())
	default:
		var names []string
		for _, s := range secs[1:] {
			names = append(names, s.name)
		}
		what := "key"
		if _, ok := v.(map[string]any); ok {
			what = "section"
		}
		d.add(key, "unknown %s%s (top-level keys: dry_run; sections: %s)", what, didYouMean(name, append(names, "dry_run")), strings.Join(names, ", "))
	}
}

// didYouMean is "; did you mean X?" for the one of names that name is a
// slip of ("-" or nothing for "_", and at most a letter in three, and
// two, changed, added or dropped), "" when there is none or more than one.
func didYouMean(name string, names []string) string {
	bare := strings.NewReplacer("-", "", "_", "").Replace(name)
	slips := min(2, max(1, len(bare)/3))
	var close []string
	for _, n := range names {
		if editDistance(bare, strings.ReplaceAll(n, "_", "")) <= slips {
			close = append(close, n)
		}
	}
	if len(close) != 1 {
		return ""
	}
	return "; did you mean " + close[0] + "?"
}

// editDistance is the Levenshtein distance of a and b, in bytes (keys are
// ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// set checks the type of v and stores it in f.
func (d *decoder) set(key string, f field, v any) {
	switch p := f.ptr.(type) {
	case *bool:
		b, ok := v.(bool)
		if !ok {
			d.add(key, "expected a boolean (true or false), got %s", describe(v))
			return
		}
		*p = b
	case *int:
		i, ok := v.(int64)
		if !ok {
			hint := ""
			if str, isString := v.(string); isString {
				if _, err := strconv.ParseInt(strings.TrimSpace(str), 10, 64); err == nil {
					hint = fmt.Sprintf(": write it without quotes, %s = %s", lastKey(key), strings.TrimSpace(str))
				}
			}
			d.add(key, "expected an integer, got %s%s", describe(v), hint)
			return
		}
		if int64(int(i)) != i {
			d.add(key, "integer %d is out of range", i)
			return
		}
		*p = int(i)
	case *float64:
		switch x := v.(type) {
		case float64:
			*p = x
		case int64:
			*p = float64(x)
		default:
			d.add(key, "expected a number, got %s", describe(v))
		}
	case *string:
		s, ok := v.(string)
		if !ok {
			hint := ""
			switch x := v.(type) {
			case int64:
				hint = fmt.Sprintf(": quote it, %s = \"%d\"", lastKey(key), x)
			case float64:
				hint = fmt.Sprintf(": quote it, %s = \"%s\"", lastKey(key), strconv.FormatFloat(x, 'g', -1, 64))
			}
			d.add(key, "expected a string, got %s%s", describe(v), hint)
			return
		}
		if s != strings.TrimSpace(s) {
			// Invisible in every message that quotes the path or
			// endpoint later ("no such file").
			d.add(key, "%s starts or ends with white space: remove it", quote(s))
			return
		}
		if !d.visible(key, s) {
			return
		}
		*p = s
	case *time.Duration:
		s, ok := v.(string)
		if !ok {
			d.add(key, "expected a duration string such as \"30s\" or \"5m\", got %s", describe(v))
			return
		}
		if !d.visible(key, s) {
			return
		}
		dur, err := time.ParseDuration(s)
		switch {
		case err != nil && goDuration.MatchString(s):
			// time.ParseDuration calls a value too large for it invalid too.
			d.add(key, "duration %s is out of range: a Go duration is at most %s (about 292 years), either sign; give a shorter one",
				quote(s), time.Duration(math.MaxInt64))
			return
		case err != nil:
			d.add(key, "invalid duration %s (use Go duration syntax such as \"30s\", \"5m\"; units ns, us, ms, s, m, h)", quote(s))
			return
		}
		*p = dur
	default:
		panic(fmt.Sprintf("config: schema field %s has unsupported type %T", key, f.ptr))
	}
}

// visible records a problem of key, and returns false, when its string
// value s holds a character no message shows: "no such file" would then
// quote a path that looks right.
func (d *decoder) visible(key, s string) bool {
	r, what, hidden := hiddenRune(s)
	if hidden {
		d.add(key, "%s contains %U, %s: remove it (retype the value if it was pasted)", quote(s), r, what)
	}
	return !hidden
}

// unquotedValue is a key/value line whose value is one word written without
// quotes, brackets or braces (action = stop, period = 30s # a comment): its
// first group is the key as written, its second the word.
var unquotedValue = regexp.MustCompile(`^([^=#"'\[\]]+?)\s*=\s*([^\s=#"'\[\]{},]+)\s*(?:#.*)?$`)

// goDuration is the syntax time.ParseDuration accepts, besides "0": a value
// of this syntax that it refuses is out of range.
var goDuration = regexp.MustCompile(`^[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+$`)

// unquotedHint returns what to write instead when line (1-based) of data,
// where go-toml failed, sets key (dotted) to a word without quotes: a string
// or a duration is quoted, a boolean is true or false in lower case. It
// returns "" for another line or key, and for a word that a duration key
// would refuse quoted too.
func unquotedHint(data []byte, line int, key string) string {
	lines := strings.Split(string(data), "\n")
	if line < 1 || line > len(lines) {
		return ""
	}
	m := unquotedValue.FindStringSubmatch(strings.TrimSpace(lines[line-1]))
	f, ok := schemaField(key)
	if m == nil || !ok {
		return ""
	}
	written, word := m[1], m[2]
	switch f.ptr.(type) {
	case *time.Duration:
		if goDuration.MatchString(word) {
			return fmt.Sprintf("a duration is a string: %s = %q", written, word)
		}
	case *string:
		return fmt.Sprintf("a string is quoted: %s = %q", written, word)
	case *bool:
		if lower := strings.ToLower(word); lower == "true" || lower == "false" {
			return fmt.Sprintf("a boolean is true or false, lower case: %s = %s", written, lower)
		}
		return fmt.Sprintf("a boolean is true or false, lower case: %s = true or %s = false", written, written)
	}
	return ""
}

// schemaField returns the field of key (dotted), if it is one of the
// schema's keys.
func schemaField(key string) (field, bool) {
	for _, sec := range schema(&Config{}) {
		for _, f := range sec.fields {
			if sec.key(f.name) == key {
				return f, true
			}
		}
	}
	return field{}, false
}

// hiddenRune returns the first rune of s that a message or a terminal does
// not show as itself, and what it is: a format character (unicode.Cf, such
// as U+200B ZERO WIDTH SPACE or U+FEFF, which pasted text brings), white
// space other than a plain space, or another non-printable character.
func hiddenRune(s string) (rune, string, bool) {
	for _, r := range s {
		switch {
		case r == '\u200c' || r == '\u200d':
			// Zero-width non-joiner and joiner: part of words in Persian
			// and Indic scripts, not a paste's leftover.
		case unicode.Is(unicode.Cf, r):
			return r, "an invisible format character", true
		case r != ' ' && unicode.IsSpace(r):
			return r, "white space other than a plain space", true
		case !unicode.IsPrint(r):
			return r, "a non-printable character", true
		}
	}
	return 0, "", false
}

// tomlError records err, returned by go-toml for data, with its line.
func (d *decoder) tomlError(data []byte, err error) {
	msg := "invalid TOML: " + strings.TrimPrefix(err.Error(), "toml: ")
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, _ := de.Position()
		key := syntaxKey(data, line)
		if hint := unquotedHint(data, line, key); hint != "" {
			// The parser's own words are about the number or the
			// true/false/nan/inf it tried to read the word as.
			msg = hint + " (" + msg + ")"
		}
		d.addAt(line, key, "%s", msg)
		return
	}
	// Errors about redefined keys and tables carry no position. Decoding
	// stops at the first failing expression, so find the shortest prefix of
	// whole expressions that fails.
	s := scan(data)
	n := len(s.exprs)
	end := func(i int) int {
		if i+1 < n {
			return s.exprs[i+1].start
		}
		return len(data)
	}
	i := sort.Search(n, func(i int) bool {
		var m map[string]any
		return toml.Unmarshal(data[:end(i)], &m) != nil
	})
	if i == n {
		d.addAt(0, "", "%s", msg)
		return
	}
	d.addAt(s.exprs[i].line, s.exprs[i].key, "%s", msg)
}

// scanned is what scan learns about a text.
type scanned struct {
	lines map[string]int // dotted key or table -> line of its first occurrence
	exprs []expr         // top-level expressions (key/values and table headers)
	table string         // the table in effect where parsing stopped
	err   error          // the parser's error, if any
}

type expr struct {
	key   string // dotted key of a key/value, or the table of a header
	line  int    // line of its first key
	start int    // offset of the start of that line
}

// scan walks the expressions of data with go-toml's unstable parser,
// recording the line of every key, table header and inline table key.
func scan(data []byte) scanned {
	s := scanned{lines: map[string]int{}}
	var p unstable.Parser
	p.Reset(data)
	var table []string
	for p.NextExpression() {
		e := p.Expression()
		var path []string
		var first *unstable.Node
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			table, first = keyPath(nil, e.Key())
			path = table
		case unstable.KeyValue:
			path, first = keyPath(table, e.Key())
		default:
			continue
		}
		pos := p.Shape(first.Raw).Start
		s.record(path, pos.Line)
		if e.Kind == unstable.KeyValue {
			s.inline(&p, path, e.Value())
		}
		s.exprs = append(s.exprs, expr{key: dotted(path...), line: pos.Line, start: pos.Offset - (pos.Column - 1)})
	}
	s.table = dotted(table...)
	s.err = p.Error()
	return s
}

// maxRecordedDepth bounds the keys whose lines are recorded: no key of the
// configuration is nested half as deep, and a deeper one is reported at its
// first unknown part. Without it, recording every prefix of every key made a
// text of deeply nested inline tables cost time cubic in its depth (12 KB
// took 20 s).
const maxRecordedDepth = 8

// inline records the keys of v, the value of key path, if it is an inline table.
func (s *scanned) inline(p *unstable.Parser, path []string, v *unstable.Node) {
	if v.Kind != unstable.InlineTable || len(path) >= maxRecordedDepth {
		return
	}
	it := v.Children()
	for it.Next() {
		kv := it.Node()
		if kv.Kind != unstable.KeyValue {
			continue
		}
		sub, first := keyPath(path, kv.Key())
		s.record(sub, p.Shape(first.Raw).Start.Line)
		s.inline(p, sub, kv.Value())
	}
}

// record sets the line of path and of its parent tables, unless known already.
func (s *scanned) record(path []string, line int) {
	for i := range min(len(path), maxRecordedDepth) {
		k := dotted(path[:i+1]...)
		if _, ok := s.lines[k]; !ok {
			s.lines[k] = line
		}
	}
}

// keyPath returns prefix followed by the parts of key, and the first key node.
func keyPath(prefix []string, key unstable.Iterator) ([]string, *unstable.Node) {
	path := slices.Clone(prefix)
	var first *unstable.Node
	for key.Next() {
		if first == nil {
			first = key.Node()
		}
		path = append(path, string(key.Node().Data))
	}
	return path, first
}

// syntaxKey guesses the dotted key a syntax error on line belongs to: the
// key or table header written on that line, within the table in effect. It
// returns the table alone, or "", when the line does not start with a key.
func syntaxKey(data []byte, line int) string {
	s := scan(data)
	lines := bytes.Split(data, []byte("\n"))
	if line < 1 || line > len(lines) {
		return s.table
	}
	text := strings.TrimSpace(string(lines[line-1]))
	if h, ok := strings.CutPrefix(text, "["); ok {
		h = strings.TrimPrefix(h, "[")
		if i := strings.IndexAny(h, "]#"); i >= 0 {
			h = h[:i]
		}
		return bareKey(h)
	}
	k, _, ok := strings.Cut(text, "=")
	if !ok {
		return s.table
	}
	k = bareKey(k)
	switch {
	case k == "":
		return s.table
	case s.table == "":
		return k
	default:
		return s.table + "." + k
	}
}

// bareKey normalises a dotted key of bare parts ("a . b" -> "a.b"), or
// returns "" if text is not one.
func bareKey(text string) string {
	parts := strings.Split(text, ".")
	for i, part := range parts {
		part = strings.TrimSpace(part)
		if !isBare(part) {
			return ""
		}
		parts[i] = part
	}
	return strings.Join(parts, ".")
}

// dotted joins key parts as written in TOML, quoting parts that are not bare.
func dotted(parts ...string) string {
	quoted := make([]string, len(parts))
	for i, p := range parts {
		if isBare(p) {
			quoted[i] = p
		} else {
			quoted[i] = strconv.Quote(p)
		}
	}
	return strings.Join(quoted, ".")
}

// isBare reports whether s is a TOML bare key: A-Z a-z 0-9 _ -.
func isBare(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// describe names the TOML type and value of a decoded value.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return "string " + quote(x)
	case int64:
		return "integer " + strconv.FormatInt(x, 10)
	case float64:
		return "float " + strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return "boolean " + strconv.FormatBool(x)
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	default:
		return "a date/time"
	}
}

// lastKey is key's last element, as written in its section (max_parallel
// of housekeeping.max_parallel).
func lastKey(key string) string {
	return key[strings.LastIndex(key, ".")+1:]
}

// quote quotes s for a message, shortening long values.
func quote(s string) string {
	const limit = 64
	if len(s) > limit {
		return strconv.Quote(s[:limit]) + "..."
	}
	return strconv.Quote(s)
}

package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Error is one problem in a configuration.
//
// Its text is "SOURCE:LINE: KEY: MSG", for example
//
//	/etc/nri/conf.d/10-nri-housekeeper.conf:7: housekeeping.period: invalid duration "5 minutes" (use Go duration syntax such as "30s", "5m"; units ns, us, ms, s, m, h)
//
// LINE is "(default)" when the key is not in the text (a default value failed
// a rule that depends on another key). KEY and its colon are left out when
// the problem is not about one key (a text larger than MaxSize), and so is
// LINE when it is 0. Without a source (Config.Validate) the text is
// "KEY: MSG".
type Error struct {
	Source string // where the text came from; "" for Config.Validate
	Line   int    // 1-based line of the key in the text; 0 if not in the text
	Key    string // full dotted key, e.g. "housekeeping.period"; "" if unknown
	Msg    string // what is wrong and what is expected
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
		switch {
		case e.Line > 0:
			b.WriteString(":" + strconv.Itoa(e.Line))
		case e.Key != "":
			b.WriteString(":(default)")
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Problems returns every *Error contained in err (which Parse, Load and
// Validate build with errors.Join), in order. It returns nil when err holds
// none, e.g. for a read error from Load.
func Problems(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		if e, ok := err.(*Error); ok {
			out = append(out, e)
			return
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			if x := u.Unwrap(); x != nil {
				walk(x)
			}
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

// problems collects the problems of one text.
type problems struct {
	source  string
	lines   map[string]int    // dotted key -> line; nil outside Parse
	aliased map[string]string // current key -> the deprecated key the text set it with; nil if none
	// budgetNoted: a notice already says what the budget set to 0 does.
	budgetNoted bool
	list        []*Error
}

// add records a problem of key, taking its line from the text (0 if absent).
// A key the text set with a deprecated alias is reported as that alias.
func (p *problems) add(key, format string, args ...any) {
	key = p.name(key)
	p.addAt(p.lines[key], key, format, args...)
}

// name returns key as the text spelled it: the deprecated alias the text set
// it with, if any, else key itself.
func (p *problems) name(key string) string {
	if old, ok := p.aliased[key]; ok {
		return old
	}
	return key
}

// has reports whether key (as the text spelled it) has a problem already:
// a key with a value of the wrong type keeps its default, which a rule
// between two keys must not then hold against the other.
func (p *problems) has(key string) bool {
	key = p.name(key)
	return slices.ContainsFunc(p.list, func(e *Error) bool { return e.Key == key })
}

func (p *problems) addAt(line int, key, format string, args ...any) {
	p.list = append(p.list, &Error{
		Source: p.source,
		Line:   line,
		Key:    key,
		Msg:    fmt.Sprintf(format, args...),
	})
}

// err joins the problems ordered by line (keys not in the text last), then by
// key, or returns nil if there are none.
func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	slices.SortStableFunc(p.list, func(a, b *Error) int {
		switch {
		case a.Line == b.Line:
			return strings.Compare(a.Key, b.Key)
		case a.Line == 0:
			return 1
		case b.Line == 0:
			return -1
		default:
			return a.Line - b.Line
		}
	})
	errs := make([]error, len(p.list))
	for i, e := range p.list {
		errs[i] = e
	}
	return errors.Join(errs...)
}

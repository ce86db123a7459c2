package workflow

import (
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // time zones work in a FROM scratch image, without /usr/share/zoneinfo

	"github.com/robfig/cron/v3"
	yaml "go.yaml.in/yaml/v3"
)

// ScheduleTrigger starts a run at the times a cron expression names.
type ScheduleTrigger struct {
	// Cron is the expression as written: five fields (minute hour
	// day-of-month month day-of-week) or a descriptor such as @daily. A
	// schedule event carries it in Event.Schedule.
	Cron string
	// Timezone is where the cron's wall-clock times are read; default UTC.
	Timezone *time.Location
	sched    cron.Schedule
}

// Next returns the first time after t at which the schedule fires.
func (s *ScheduleTrigger) Next(t time.Time) time.Time {
	return s.sched.Next(t.In(s.Timezone))
}

// MaxSchedules bounds the cron lines of one workflow.
const MaxSchedules = 20

// cronReference is where the never-fires check starts. robfig/cron looks
// five years ahead, which always includes a 29 February.
var cronReference = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// ParseCron validates a cron expression the way a schedule trigger does.
func ParseCron(spec string) (cron.Schedule, error) {
	spec = strings.TrimSpace(spec)
	switch {
	case spec == "":
		return nil, fmt.Errorf("the cron expression is empty")
	case strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ="):
		return nil, fmt.Errorf("cron %q: set the time zone with timezone:, not in the expression", spec)
	case strings.HasPrefix(spec, "@every"):
		return nil, fmt.Errorf("cron %q: @every is not supported; write a cron expression such as \"*/15 * * * *\"", spec)
	}
	sched, err := parseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("cron %q is not valid: %s (write five fields: minute hour day-of-month month day-of-week, or @hourly, @daily, @weekly, @monthly, @yearly)", spec, err)
	}
	if sched.Next(cronReference).IsZero() {
		return nil, fmt.Errorf("cron %q never fires", spec)
	}
	return sched, nil
}

// parseStandard calls the cron parser, turning a panic on odd input into an error.
func parseStandard(spec string) (s cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("unparseable")
		}
	}()
	return cron.ParseStandard(spec)
}

// parseSchedules reads on.schedule: a list of {cron, timezone} mappings
// (or cron strings), or a single mapping.
func (p *parser) parseSchedules(k, n *yaml.Node) []*ScheduleTrigger {
	if isNull(n) {
		p.errorf(k, `on.schedule: needs at least one cron line, like schedule: [{cron: "0 3 * * *"}]`)
		return nil
	}
	items := []*yaml.Node{n}
	if n.Kind == yaml.SequenceNode {
		items = n.Content
	}
	if len(items) > MaxSchedules {
		p.errorf(n, "on.schedule: %d cron lines; a workflow may have at most %d", len(items), MaxSchedules)
		return nil
	}
	var out []*ScheduleTrigger
	seen := map[string]bool{}
	for _, it := range items {
		s := p.parseSchedule(it)
		if s == nil {
			continue
		}
		key := s.Cron + "\x00" + s.Timezone.String()
		if seen[key] {
			p.errorf(it, "on.schedule: cron %q is listed twice", s.Cron)
			continue
		}
		seen[key] = true
		out = append(out, s)
	}
	if len(out) == 0 && len(items) == 0 {
		p.errorf(n, "on.schedule: the list is empty")
	}
	return out
}

func (p *parser) parseSchedule(n *yaml.Node) *ScheduleTrigger {
	s := &ScheduleTrigger{Timezone: time.UTC}
	cronNode := n
	if n.Kind != yaml.ScalarNode {
		pairs, ok := p.mapping(n, "a schedule")
		if !ok {
			return nil
		}
		f := p.fields(pairs, "a schedule", scheduleKeys)
		c, has := f["cron"]
		if !has {
			p.errorf(n, "on.schedule: cron: is missing")
			return nil
		}
		cronNode = c.v
		if tz, has := f["timezone"]; has {
			name, ok := p.str(tz.v, "timezone")
			if !ok {
				return nil
			}
			loc, err := loadLocation(name)
			if err != nil {
				p.errorf(tz.v, "timezone: %s", err)
				return nil
			}
			s.Timezone = loc
		}
	}
	spec, ok := p.str(cronNode, "cron")
	if !ok {
		return nil
	}
	sched, err := ParseCron(spec)
	if err != nil {
		p.errorf(cronNode, "on.schedule: %s", err)
		return nil
	}
	s.Cron, s.sched = strings.TrimSpace(spec), sched
	return s
}

// loadLocation accepts IANA zone names and UTC, never the host's Local.
func loadLocation(name string) (*time.Location, error) {
	if name == "" || name == "Local" || strings.ContainsAny(name, "\\\x00") || strings.HasPrefix(name, "/") || strings.Contains(name, "..") {
		return nil, fmt.Errorf("%q is not a time zone; use an IANA name like UTC or Europe/Berlin", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not a time zone; use an IANA name like UTC or Europe/Berlin", name)
	}
	return loc, nil
}

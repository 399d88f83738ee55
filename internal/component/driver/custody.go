package driver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/kubevol/kubevol/internal/component/driver/backend"
	"github.com/kubevol/kubevol/internal/component/driver/state"
)

// Recover is an operator's decision about a state directory that the driver will not trust
// on its own: a record that is missing, unreadable or written for another driver, node or
// directory, while data is present. Neither choice deletes anything.
type Recover string

const (
	// RecoverNone refuses to start; the error names the file and these choices.
	RecoverNone Recover = ""
	// RecoverAdopt trusts the records found (a state directory moved on purpose, a node
	// renamed): their identity is rewritten to this driver, node and directory.
	RecoverAdopt Recover = "adopt"
	// RecoverQuarantine sets the records aside (renamed, kept) and starts with empty ones;
	// every volume and snapshot found is then moved to the quarantine, where an operator
	// inspects it and deletes it by hand.
	RecoverQuarantine Recover = "quarantine"
)

// markerName is the identity marker at the top of the state directory, beside the data.
const markerName = "identity.json"

// quarantineDir is where data that no record names is moved instead of being deleted.
func quarantineDir(stateDir string) string { return filepath.Join(stateDir, "quarantine") }

// custody decides, at start-up, whether the records in a state directory may be acted on:
// the driver removes data on the word of its records, so a record it cannot prove is its
// own stops it, with an error that names the file and the way out. It is used once, by New.
type custody struct {
	cfg *Config
	log klog.Logger
	// id is the identity the records must carry: the marker's.
	id *state.Identity
}

// claimStateDir reads the state directory's marker, or creates it on a first start. A
// marker for another driver, node or directory is refused unless the operator said how to
// recover.
func claimStateDir(cfg *Config, log klog.Logger) (*custody, error) {
	f := state.NewFile(filepath.Join(cfg.StateDir, markerName))
	cu := &custody{cfg: cfg, log: log}
	var m state.Identity
	found, err := f.Load(&m)
	switch {
	case err != nil && cfg.Recover == RecoverNone:
		return nil, cu.refuse("marker", f.Path(), fmt.Sprintf("it cannot be read (%v)", err))
	case err != nil:
		// Set aside, then created afresh as on a first start, so that the two processes
		// of a split node, both told to recover, end up with the same new marker.
		if err := setAside(log, f.Path()); err != nil {
			return nil, err
		}
		return claimStateDir(cfg, log)
	case !found:
		cu.id = state.NewIdentity(cfg.DriverName, cfg.NodeID, cfg.StateDir)
		won, err := f.Create(cu.id)
		if err != nil {
			return nil, err
		}
		if !won { // the other process of a split node initialised the directory just now
			return claimStateDir(cfg, log)
		}
		log.Info("Marked the state directory as this driver's", "path", f.Path(), "id", cu.id.ID)
		return cu, nil
	}
	want := state.Identity{ID: m.ID, Driver: cfg.DriverName, NodeID: cfg.NodeID, StateDir: cfg.StateDir}
	why := want.Mismatch(&m)
	if why == "" {
		cu.id = &m
		return cu, nil
	}
	if cfg.Recover == RecoverNone {
		return nil, cu.refuse("marker", f.Path(), "it was written for "+why)
	}
	// The ID is kept, so that both processes of a split node agree on it; the records,
	// written for the old owner, are then adopted or set aside by open.
	cu.id = &want
	log.Info("Rewriting the state directory marker", "path", f.Path(), "was", why, "recover", cfg.Recover)
	return cu, f.Save(cu.id)
}

// record is a record document under custody: controller.json or node.json.
type record struct {
	file *state.File
	// doc is the document in memory; reset replaces it with an empty one.
	doc   func() state.Document
	reset func()
	// data lists what of the state directory's data this document accounts for.
	data []string
}

// open loads r and checks it against the marker. The answer for each case:
//   - missing, or unreadable (empty, truncated): with no data present, a first start (an
//     unreadable file is set aside, never overwritten); with data, refuse.
//   - written before markers existed (no identity): adopted when this start made the
//     marker, else refused;
//   - another identity: refused.
//
// RecoverAdopt and RecoverQuarantine turn the refusals into adoption or a fresh record.
// The document is saved whenever its identity was set, so the next start finds it.
func (cu *custody) open(r record) error {
	found, err := r.file.Load(r.doc())
	hasData, derr := anyData(r.data)
	if derr != nil {
		return derr
	}
	problem := ""
	switch {
	case err != nil:
		problem = fmt.Sprintf("it cannot be read (%v)", err)
	case !found:
		problem = "it is missing"
	case r.doc().Owner() == nil:
		// Written by a kubevol before markers (an upgrade, or a backup restored from
		// then): nothing in it can be checked, and refusing would block every upgrade.
		cu.log.Info("Adopting records written before state directories were marked", "path", r.file.Path())
		return cu.save(r)
	default:
		if why := cu.id.Mismatch(r.doc().Owner()); why != "" {
			problem = "it was written for " + why
		}
	}
	if problem == "" {
		return nil
	}
	switch {
	case (err != nil || !found) && !hasData:
		// Nothing to lose: a first start, or a record without anything it could name.
	case cu.cfg.Recover == RecoverAdopt && err == nil && found:
		cu.log.Info("Adopting records", "path", r.file.Path(), "was", problem)
		return cu.save(r)
	case cu.cfg.Recover == RecoverQuarantine:
		cu.log.Info("Setting the records aside; the data they named will be quarantined", "path", r.file.Path(), "was", problem)
	case err != nil || !found:
		return cu.refuseLost(r.file.Path(), problem+", and data is present in "+fmt.Sprint(r.data))
	default:
		return cu.refuse("record file", r.file.Path(), problem)
	}
	if found {
		if err := setAside(cu.log, r.file.Path()); err != nil {
			return err
		}
	}
	r.reset()
	return cu.save(r)
}

// setAside renames a file the driver will not use, so that nothing overwrites it.
func setAside(log klog.Logger, path string) error {
	aside := fmt.Sprintf("%s.set-aside-%s", path, time.Now().UTC().Format("20060102T150405.000000000Z"))
	if err := os.Rename(path, aside); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	log.Info("Kept a file the driver will not use", "path", aside)
	return nil
}

// save writes r with the marker's identity.
func (cu *custody) save(r record) error {
	r.doc().SetOwner(cu.id)
	return r.file.Save(r.doc())
}

// refuse is the error of a start-up that will not act on the file at path because it was
// written for another owner.
func (cu *custody) refuse(what, path, problem string) error {
	return fmt.Errorf("refusing to start: the state directory's %s %s cannot be trusted: %s. No data was touched. "+
		"If --state-dir, --node-id or --drivername is wrong, fix it. "+
		"If the directory was moved or the node renamed on purpose, start once with --recover=adopt to trust the records found here; "+
		"otherwise --recover=quarantine sets them aside and moves every volume and snapshot into %s, where nothing is deleted "+
		"(docs/driver.md, \"Recovering a state directory\")", what, path, problem, quarantineDir(cu.cfg.StateDir))
}

// refuseLost is the error of a start-up whose record is lost or damaged while data is
// present: adopting is not possible, there is nothing to trust.
func (cu *custody) refuseLost(path, problem string) error {
	return fmt.Errorf("refusing to start: the record file %s cannot be used: %s. No data was touched. "+
		"If --state-dir is wrong, fix it. If you have a backup of the file taken while the driver was stopped, restore it. "+
		"Otherwise start once with --recover=quarantine to start with empty records and move every volume and snapshot into %s, "+
		"where nothing is deleted (docs/driver.md, \"Recovering a state directory\")", path, problem, quarantineDir(cu.cfg.StateDir))
}

// anyData reports whether any of dirs holds a volume or snapshot, complete or partial.
func anyData(dirs []string) (bool, error) {
	for _, d := range dirs {
		entries, err := backend.Scan(d)
		if err != nil {
			return false, err
		}
		if len(entries) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// quarantine moves data that no record or intent names out of the way: it may be a volume
// whose record was lost, and only an operator can tell. The move is a rename within the
// state directory, so nothing is copied and nothing is lost; a rename that fails stops the
// start-up rather than fall back to deleting.
func quarantine(log klog.Logger, stateDir, area string, e backend.Entry) error {
	dir := filepath.Join(quarantineDir(stateDir), area)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	dst := filepath.Join(dir, filepath.Base(e.Path))
	if _, err := os.Lstat(dst); err == nil {
		dst = fmt.Sprintf("%s.%d", dst, time.Now().UnixNano())
	}
	if err := os.Rename(e.Path, dst); err != nil {
		return fmt.Errorf("quarantine %s: %w", e.Path, err)
	}
	log.Info("Quarantined data that no record names; it is kept, delete it by hand once you know it is not needed",
		"path", e.Path, "quarantine", dst)
	return nil
}

// quarantineUsage measures the quarantine: it holds space of the pool until an operator
// empties it.
func quarantineUsage(stateDir string) (bytes, entries int64, err error) {
	dir := quarantineDir(stateDir)
	areas, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	for _, a := range areas {
		if !a.IsDir() {
			continue
		}
		des, err := os.ReadDir(filepath.Join(dir, a.Name()))
		if err != nil {
			return 0, 0, err
		}
		entries += int64(len(des))
	}
	bytes, _, err = backend.TreeUsage(dir)
	return bytes, entries, err
}

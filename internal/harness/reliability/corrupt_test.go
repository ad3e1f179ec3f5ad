package reliability

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"testing"

	sluice "github.com/sluicefs/sluice"
	"github.com/sluicefs/sluice/device"
	"github.com/sluicefs/sluice/device/memdev"
	"github.com/sluicefs/sluice/internal/harness/testvol"
	"github.com/sluicefs/sluice/meta"
	"github.com/sluicefs/sluice/volume"
)

// Part 4, corrupted volumes: bytes changed in the header, in metadata
// records (garbage values written for existing keys through
// meta.OpenPebble), or in the data image. Opening and CheckVolume must
// refuse or report with a clear error, never panic, and never return
// wrong data where a checksum could have caught it: the header and every
// metadata value are checksummed (CRC-32C), file data is not.

// volTemplate is a small, synced volume with one of everything: files
// written directly and through the cache, a sparse file, preallocated
// (unwritten) space, directories, a hard link, a symlink, xattrs and an
// orphan (a file unlinked while open).
type volTemplate struct {
	disks    *testvol.Disks
	files    map[string][]byte
	symlinks map[string]string
	xattrs   map[string]map[string]string
	keys     [][]byte
	// data holds the device ranges of written extents.
	data [][2]int64
}

func buildTemplate(t testing.TB) *volTemplate {
	t.Helper()
	e := newEnv(t, envConfig{size: 8 << 20})
	tpl := &volTemplate{files: map[string][]byte{}, symlinks: map[string]string{}, xattrs: map[string]map[string]string{}}
	for _, d := range []string{"/d1", "/d2", "/d2/sub"} {
		if err := e.fs.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p string, flags int, off int64, n int, seed uint64) {
		f, err := e.fs.OpenFile(p, sluice.O_RDWR|sluice.O_CREAT|flags, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		d := pattern(n, seed)
		if _, err := f.WriteAt(d, off); err != nil {
			t.Fatal(err)
		}
		c := tpl.files[p]
		if end := off + int64(n); end > int64(len(c)) {
			c = append(c, make([]byte, end-int64(len(c)))...)
		}
		copy(c[off:], d)
		tpl.files[p] = c
	}
	write("/d1/f1", sluice.O_DIRECT, 0, 64<<10, 1)
	write("/d1/f2", 0, 0, 10000, 2)
	write("/d2/sub/big", 0, 0, 256<<10, 3)
	write("/sparse", 0, 1<<20, 5000, 4)
	if err := e.fs.Link("/d1/f1", "/d2/f1link"); err != nil {
		t.Fatal(err)
	}
	tpl.files["/d2/f1link"] = tpl.files["/d1/f1"]
	pre := e.create("/pre", 0)
	if err := pre.Fallocate(sluice.FallocKeepSize, 0, 64<<10); err != nil {
		t.Fatal(err)
	}
	pre.Close()
	tpl.files["/pre"] = nil
	if err := e.fs.Symlink("d1/f1", "/sym"); err != nil {
		t.Fatal(err)
	}
	tpl.symlinks["/sym"] = "d1/f1"
	for _, x := range []struct{ p, k, v string }{{"/d1/f2", "user.k", "value"}, {"/d2", "user.dir", "v2"}} {
		if err := e.fs.Setxattr(x.p, x.k, []byte(x.v), 0); err != nil {
			t.Fatal(err)
		}
		if tpl.xattrs[x.p] == nil {
			tpl.xattrs[x.p] = map[string]string{}
		}
		tpl.xattrs[x.p][x.k] = x.v
	}
	orph := e.create("/orphan", sluice.O_DIRECT)
	if _, err := orph.WriteAt(pattern(8192, 5), 0); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.Unlink("/orphan"); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.SyncAll(); err != nil {
		t.Fatal(err)
	}
	// The image, with the orphan still open.
	tpl.disks = e.disks.Copy()
	orph.Close()
	e.abandon()

	// Every key, and where the data lives.
	kv, err := tpl.clone().OpenKV()
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	type written struct {
		ino meta.Ino
		r   [2]int64
	}
	var extents []written
	orphans := map[meta.Ino]bool{}
	err = kv.Scan([]byte{0}, []byte{0xff}, func(k, v []byte) error {
		tpl.keys = append(tpl.keys, append([]byte(nil), k...))
		switch k[0] {
		case 'E':
			ino, x, err := meta.DecodeExtent(k, v)
			if err != nil {
				return err
			}
			if x.State == meta.Written {
				extents = append(extents, written{ino, [2]int64{int64(x.DevBlock) * 4096, int64(x.Len) * 4096}})
			}
		case 'O':
			ino, err := meta.OrphanIno(k)
			if err != nil {
				return err
			}
			orphans[ino] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(orphans) != 1 {
		t.Fatalf("template has %d orphans, want 1", len(orphans))
	}
	for _, x := range extents {
		if !orphans[x.ino] { // the orphan's blocks are freed at mount
			tpl.data = append(tpl.data, x.r)
		}
	}
	return tpl
}

// clone returns independent copies of the template's devices.
func (tpl *volTemplate) clone() *testvol.Disks { return tpl.disks.Copy() }

// xorDevice XORs x into the device at off.
func xorDevice(t testing.TB, mem *memdev.Device, off int64, x []byte) {
	t.Helper()
	lo := off / 512 * 512
	hi := (off + int64(len(x)) + 511) / 512 * 512
	hi = min(hi, mem.Size())
	buf := device.AlignedBuf(int(hi - lo))
	if err := device.ReadAt(mem, buf, lo); err != nil {
		t.Fatal(err)
	}
	for i, b := range x {
		if j := off - lo + int64(i); j < int64(len(buf)) {
			buf[j] ^= b
		}
	}
	if err := device.WriteAt(mem, buf, lo); err != nil {
		t.Fatal(err)
	}
	if err := device.Flush(mem); err != nil {
		t.Fatal(err)
	}
}

// setRecord writes value v for key k in the metadata held by d, and
// returns the value it had.
func setRecord(t testing.TB, d *testvol.Disks, k, v []byte) []byte {
	t.Helper()
	kv, err := d.OpenKV()
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	old, err := kv.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	tx := kv.NewTxn()
	tx.Set(k, v)
	if err := tx.Commit(true); err != nil {
		t.Fatal(err)
	}
	return old
}

// decodesAsValid reports whether v is a well-formed value for key k: a
// corruption no checksum can see.
func decodesAsValid(k, v []byte) bool {
	var err error
	switch k[0] {
	case 'S':
		_, err = meta.DecodeSuperblock(v)
	case 'I':
		_, err = meta.DecodeInode(v)
	case 'D':
		_, err = meta.DecodeDirent(v)
	case 'E':
		_, _, err = meta.DecodeExtent(k, v)
	case 'F':
		_, _, err = meta.DecodeFree(k, v)
	default:
		_, err = meta.DecodeBytes("x", v)
	}
	return err == nil
}

// corruptOutcome is what opening and reading a corrupted volume did.
type corruptOutcome struct {
	attachErr error               // from Attach (CheckVolume's or the mount's)
	report    *sluice.CheckReport // CheckVolume's, if it ran
	openErr   error               // from OpenVolume
	wrong     []string            // objects read back with no error but wrong content
	errs      map[string]error    // objects whose read failed
	readErrs  []error             // every read error
}

// flagged reports whether the corruption was refused or reported.
func (o *corruptOutcome) flagged() bool {
	return o.attachErr != nil || o.openErr != nil || o.report != nil && !o.report.Clean()
}

// evaluate checks, then mounts the corrupted copy and reads every object
// of the template back.
func (tpl *volTemplate) evaluate(t testing.TB, d *testvol.Disks) *corruptOutcome {
	t.Helper()
	o := &corruptOutcome{errs: map[string]error{}}
	o.report, o.attachErr = checkVolume(d)
	if o.attachErr != nil {
		o.report = nil
	}
	e, err := openEnv(t, envConfig{size: 8 << 20}, d)
	if err != nil {
		if o.attachErr == nil {
			o.openErr = err
		}
		return o
	}
	defer e.abandon()
	fail := func(what string, err error) {
		o.errs[what] = err
		o.readErrs = append(o.readErrs, err)
	}
	for p, want := range tpl.files {
		got, err := readFile(e.fs, p)
		switch {
		case err != nil:
			fail(p, err)
		case !bytes.Equal(got, want):
			o.wrong = append(o.wrong, p)
		}
	}
	for p, want := range tpl.symlinks {
		got, err := e.fs.Readlink(p)
		switch {
		case err != nil:
			fail(p, err)
		case got != want:
			o.wrong = append(o.wrong, p)
		}
	}
	for p, xs := range tpl.xattrs {
		for k, want := range xs {
			got, err := e.fs.Getxattr(p, k)
			switch {
			case err != nil:
				fail(p+"@"+k, err)
			case string(got) != want:
				o.wrong = append(o.wrong, p+"@"+k)
			}
		}
	}
	for _, d := range []string{"/", "/d1", "/d2", "/d2/sub"} {
		if _, err := e.fs.ReadDir(d); err != nil {
			fail(d, err)
		}
	}
	sort.Strings(o.wrong)
	return o
}

// TestCorruptHeader: a flipped bit anywhere in the 64 header bytes makes
// the volume refuse to attach with ErrBadHeader; bytes of block 0 past
// the header are not part of it.
func TestCorruptHeader(t *testing.T) {
	tpl := buildTemplate(t)
	for i := range volume.HeaderSize {
		c := tpl.clone()
		xorDevice(t, c.Mem, int64(i), []byte{1 << (i % 8)})
		o := tpl.evaluate(t, c)
		if !errors.Is(o.attachErr, volume.ErrBadHeader) {
			t.Errorf("header byte %d flipped: attach: %v, want ErrBadHeader", i, o.attachErr)
		}
	}
	c := tpl.clone()
	xorDevice(t, c.Mem, volume.HeaderSize, bytes.Repeat([]byte{0xa5}, 4096-volume.HeaderSize))
	if o := tpl.evaluate(t, c); o.flagged() || len(o.wrong) > 0 || len(o.errs) > 0 {
		t.Errorf("bytes after the header changed: attach %v, open %v, wrong %v, errors %v", o.attachErr, o.openErr, o.wrong, o.errs)
	}
}

// TestCorruptRecords corrupts every metadata record of the template, one
// at a time: one bit flipped, replaced by garbage, and (for one record of
// each kind) cut short:
// the corruption is refused (attach, mount) or reported (CheckVolume),
// nothing is ever read back wrong, and what cannot be read fails with an
// errno (EIO).
func TestCorruptRecords(t *testing.T) {
	tpl := buildTemplate(t)
	if len(tpl.keys) < 20 {
		t.Fatalf("template has only %d records", len(tpl.keys))
	}
	kinds := map[byte]int{}
	var unflagged []string
	for ki, k := range tpl.keys {
		kinds[k[0]]++
		for way := range 3 {
			if way == 1 && kinds[k[0]] > 1 {
				continue // cutting short: once per record kind is enough
			}
			c := tpl.clone()
			corrupt := func(old []byte) []byte {
				switch way {
				case 0:
					v := append([]byte(nil), old...)
					v[(ki*7)%len(v)] ^= 1 << (ki % 8)
					return v
				case 1:
					return old[:len(old)-1]
				}
				return pattern(len(old)+3, uint64(ki))
			}
			kv, err := c.OpenKV()
			if err != nil {
				t.Fatal(err)
			}
			old, err := kv.Get(k)
			kv.Close()
			if err != nil {
				t.Fatal(err)
			}
			nv := corrupt(old)
			setRecord(t, c, k, nv)
			what := fmt.Sprintf("record %q (%c) way %d", k, k[0], way)
			if decodesAsValid(k, nv) {
				t.Fatalf("%s: the corrupted value decodes: test setup", what)
			}
			o := tpl.evaluate(t, c)
			if len(o.wrong) > 0 {
				t.Errorf("%s: read back wrong with no error: %v", what, o.wrong)
			}
			for obj, err := range o.errs {
				if errnoOf(err) == 0 {
					t.Errorf("%s: %s: %v carries no errno", what, obj, err)
				}
			}
			if !o.flagged() {
				switch k[0] {
				case 'L', 'X':
					unflagged = append(unflagged, what)
				case 'O':
					// The orphan record's value is never read.
				default:
					t.Errorf("%s: neither refused nor reported (read errors: %v)", what, o.errs)
				}
			}
		}
	}
	t.Logf("records by kind: %v", kinds)
	if len(unflagged) > 0 {
		t.Errorf("corruptions neither refused nor reported by CheckVolume: %v", unflagged)
	}
}

// TestCorruptDataIsNotChecksummed: sluice does not checksum file data. A
// flipped bit in a data block leaves the metadata clean and is read back
// as is (this test documents it; an application that needs more must
// checksum its own data).
func TestCorruptDataIsNotChecksummed(t *testing.T) {
	tpl := buildTemplate(t)
	if len(tpl.data) == 0 {
		t.Fatal("no written extent in the template")
	}
	for i, r := range tpl.data {
		c := tpl.clone()
		xorDevice(t, c.Mem, r[0]+r[1]/2, []byte{0x10})
		o := tpl.evaluate(t, c)
		if o.flagged() || len(o.errs) > 0 {
			t.Errorf("extent %d: a data bit flip was refused or reported: attach %v, open %v, report %v, errors %v", i, o.attachErr, o.openErr, o.report, o.errs)
		}
		if len(o.wrong) == 0 {
			t.Errorf("extent %d: the flipped bit is in no file", i)
		}
	}
}

// FuzzCorruptVolume: fuzzed bytes XORed into the header block, the data
// image or written as the value of an existing metadata record. Nothing
// panics; a header corruption is refused with ErrBadHeader; a record
// value that does not decode is never read back as data; read errors
// carry an errno. (A fuzzed value that happens to decode, which is all
// the fuzzer can make with the CRC in the input, is a valid record no
// checksum can see, and only the no-panic property holds for it.)
func FuzzCorruptVolume(f *testing.F) {
	tpl := buildTemplate(f)
	f.Fuzz(func(t *testing.T, mode byte, pos uint32, val []byte) {
		if len(val) > 4096 {
			return
		}
		c := tpl.clone()
		var key, nv []byte
		switch mode % 3 {
		case 0: // the header block
			if len(val) == 0 {
				return
			}
			xorDevice(t, c.Mem, int64(pos%4096), val)
		case 1: // a metadata record
			key = tpl.keys[int(pos&0xffff)%len(tpl.keys)]
			kv, err := c.OpenKV()
			if err != nil {
				t.Fatal(err)
			}
			old, err := kv.Get(key)
			kv.Close()
			if err != nil {
				t.Fatal(err)
			}
			nv = val
			if len(val) == 0 { // flip one bit of the old value
				nv = append([]byte(nil), old...)
				b := int(pos>>16) % (len(nv) * 8)
				nv[b/8] ^= 1 << (b % 8)
			}
			setRecord(t, c, key, nv)
		case 2: // the data image
			if len(val) == 0 || len(tpl.data) == 0 {
				return
			}
			r := tpl.data[int(pos)%len(tpl.data)]
			xorDevice(t, c.Mem, r[0]+int64(pos>>8)%r[1], val)
		}
		o := tpl.evaluate(t, c)
		for obj, err := range o.errs {
			if errnoOf(err) == 0 {
				t.Errorf("%s: %v carries no errno", obj, err)
			}
		}
		switch mode % 3 {
		case 0:
			changed := false
			for i, b := range val {
				changed = changed || b != 0 && int(pos%4096)+i < volume.HeaderSize
			}
			if changed && !errors.Is(o.attachErr, volume.ErrBadHeader) {
				t.Errorf("header corrupted: attach %v, want ErrBadHeader", o.attachErr)
			}
			if !changed && (o.flagged() || len(o.wrong) > 0 || len(o.errs) > 0) {
				t.Errorf("block 0 changed past the header: attach %v, open %v, wrong %v, errors %v", o.attachErr, o.openErr, o.wrong, o.errs)
			}
		case 1:
			if !decodesAsValid(key, nv) && len(o.wrong) > 0 {
				t.Errorf("record %q set to %x: read back wrong with no error: %v", key, nv, o.wrong)
			}
		case 2:
			if o.flagged() {
				t.Errorf("data corrupted: attach %v, open %v, report %v (file data is not checksummed: the metadata should not care)", o.attachErr, o.openErr, o.report)
			}
		}
	})
}

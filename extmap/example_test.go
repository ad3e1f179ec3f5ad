package extmap_test

import (
	"fmt"

	"github.com/sluicefs/sluice/extmap"
	"github.com/sluicefs/sluice/meta"
)

// printRec prints the record changes a mutation reports; the engine puts
// them into the metadata batch of the same transaction instead.
type printRec struct{}

func (printRec) Put(e extmap.Extent) {
	p := e.Persisted()
	fmt.Printf("  put %d: %d+%d @%d %v\n", p.FileBlock, p.FileBlock, p.Len, p.DevBlock, p.State)
}
func (printRec) Delete(fb uint64) { fmt.Printf("  delete %d\n", fb) }

// A direct write into preallocated space, then the fsync that makes it
// durable.
func Example() {
	// fallocate: 16 unwritten blocks at device block 1000.
	m := extmap.New()
	fmt.Println("fallocate")
	m.Insert(extmap.Extent{FileBlock: 0, DevBlock: 1000, Len: 16, State: meta.Unwritten}, printRec{})

	// A direct write of blocks 4..7 completes during epoch 7: written in
	// core at once, but the records keep saying unwritten.
	fmt.Println("write completes")
	m.Convert(4, 4, 7, printRec{})
	for _, s := range m.Lookup(0, 16, nil) {
		fmt.Printf("  read sees %d+%d %v\n", s.FileBlock, s.Len, s.State)
	}

	// fsync: the device flush of epoch 7 has completed.
	fmt.Println("fsync")
	m.MarkDurable(7, printRec{})
	fmt.Println("pending:", m.Pending())

	// Output:
	// fallocate
	//   put 0: 0+16 @1000 unwritten
	// write completes
	//   put 0: 0+4 @1000 unwritten
	//   put 4: 4+4 @1004 unwritten
	//   put 8: 8+8 @1008 unwritten
	//   read sees 0+4 unwritten
	//   read sees 4+4 written
	//   read sees 8+8 unwritten
	// fsync
	//   put 4: 4+4 @1004 written
	// pending: false
}

// A write into device blocks that the file shares with a clone (reflink):
// copy-on-write to staged blocks, then the fsync that makes them durable.
func ExampleMap_Remap() {
	// 8 written blocks at device block 1000, shared with another file.
	m, _ := extmap.Load([]meta.Extent{{FileBlock: 0, DevBlock: 1000, Len: 8, State: meta.Written}})

	// A write of blocks 2..3 went out of place, to staged device blocks
	// 5000..5001, and completed during epoch 4: reads see the new blocks
	// at once, but the records keep naming the old ones.
	fmt.Println("write completes")
	released, _ := m.Remap(2, 2, 5000, 4, printRec{})
	fmt.Println("  staged blocks released:", released)
	for _, s := range m.Lookup(0, 8, nil) {
		fmt.Printf("  read sees %d+%d @%d\n", s.FileBlock, s.Len, s.DevBlock)
	}

	// fsync: the device flush of epoch 4 has completed.
	fmt.Println("fsync")
	for _, r := range m.MarkDurable(4, printRec{}) {
		fmt.Printf("  drop a reference to %d+%d, unstage %d+%d\n", r.Old.Start, r.Old.Len, r.New.Start, r.New.Len)
	}

	// Output:
	// write completes
	//   put 0: 0+2 @1000 written
	//   put 2: 2+2 @1002 written
	//   put 4: 4+4 @1004 written
	//   staged blocks released: []
	//   read sees 0+2 @1000
	//   read sees 2+2 @5000
	//   read sees 4+4 @1004
	// fsync
	//   put 2: 2+2 @5000 written
	//   drop a reference to 1002+2, unstage 5000+2
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// The JSON lockkit-faults writes (see history.rs), for a mutex handed from worker 1 to 2 to 3
// with a write in each hold.
const correct = `{"permits":1,"holds":[
 {"worker":1,"claim":{"kind":"exclusive"},"token":1,"invoked":5,"granted":10,"lost":null,"released":20,"freed_by":21},
 {"worker":2,"claim":{"kind":"exclusive"},"token":2,"invoked":8,"granted":25,"lost":null,"released":40,"freed_by":41},
 {"worker":3,"claim":{"kind":"exclusive"},"token":3,"invoked":30,"granted":45,"lost":null,"released":60,"freed_by":61}],
 "writes":[
 {"worker":1,"token":1,"invoked":12,"completed":[12,true]},
 {"worker":2,"token":2,"invoked":30,"completed":[30,true]},
 {"worker":3,"token":3,"invoked":50,"completed":[50,true]}]}`

func check(t *testing.T, history string) porcupine.CheckResult {
	t.Helper()
	h, err := Read(strings.NewReader(history))
	if err != nil {
		t.Fatal(err)
	}
	v, err := Check(h, "", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return v.Result
}

// edit replaces one exact piece of the correct history.
func edit(t *testing.T, history, from, to string) string {
	t.Helper()
	if strings.Count(history, from) != 1 {
		t.Fatalf("%q is not in the history exactly once", from)
	}
	return strings.Replace(history, from, to, 1)
}

func TestACorrectHistoryIsLinearizable(t *testing.T) {
	if r := check(t, correct); r != porcupine.Ok {
		t.Fatalf("got %s", r)
	}
}

func TestAStaleTokenAcceptedIsIllegal(t *testing.T) {
	last := `"completed":[50,true]}`
	h := edit(t, correct, last, last+`,
 {"worker":2,"token":2,"invoked":55,"completed":[55,true]}`)
	if r := check(t, h); r != porcupine.Illegal {
		t.Fatalf("got %s", r)
	}
	// The register refusing it is what fencing promises.
	h = edit(t, correct, last, last+`,
 {"worker":2,"token":2,"invoked":55,"completed":[55,false]}`)
	if r := check(t, h); r != porcupine.Ok {
		t.Fatalf("got %s", r)
	}
}

func TestAnUnsignalledOverlapIsIllegalAndASignalledOneIsNot(t *testing.T) {
	// Worker 2 still believed it held at 47, after worker 3's grant returned at 45.
	h := edit(t, correct, `"released":40,"freed_by":41`, `"released":47,"freed_by":48`)
	if r := check(t, h); r != porcupine.Illegal {
		t.Fatalf("got %s", r)
	}
	// Told lost() at 44, before the grant: the lock was free for worker 3.
	h = edit(t, correct, `"lost":null,"released":40,"freed_by":41`, `"lost":44,"released":47,"freed_by":48`)
	if r := check(t, h); r != porcupine.Ok {
		t.Fatalf("got %s", r)
	}
}

func TestATokenRegressionIsIllegal(t *testing.T) {
	h := edit(t, correct, `"token":3,"invoked":30,"granted":45`, `"token":2,"invoked":30,"granted":45`)
	if r := check(t, h); r != porcupine.Illegal {
		t.Fatalf("got %s", r)
	}
}

func TestATokenRegressionBetweenAcquiresUnderWayAtOnceIsIllegal(t *testing.T) {
	// Worker 3 called acquire at 20, before worker 2's grant returned at 25, so the two were
	// under way at once; but the lock went to worker 2 first (worker 3 got it only at 45), so
	// worker 3's token must be the larger.
	h := edit(t, correct, `"token":3,"invoked":30,"granted":45`, `"token":1,"invoked":20,"granted":45`)
	h = edit(t, h, `"token":1,"invoked":5,"granted":10`, `"token":0,"invoked":5,"granted":10`)
	if r := check(t, h); r != porcupine.Illegal {
		t.Fatalf("got %s", r)
	}
}

func TestAHoldThatNeverEndedBlocksEveryLaterGrant(t *testing.T) {
	h := edit(t, correct, `"lost":null,"released":40,"freed_by":41`, `"lost":null,"released":null,"freed_by":null`)
	if r := check(t, h); r != porcupine.Illegal {
		t.Fatalf("got %s", r)
	}
	// A killed holder: it stopped believing at the kill (38); its lease freed the lock at a time
	// nobody saw, so a later grant is fine.
	h = edit(t, correct, `"lost":null,"released":40,"freed_by":41`, `"lost":null,"released":38,"freed_by":null`)
	if r := check(t, h); r != porcupine.Ok {
		t.Fatalf("got %s", r)
	}
}

func TestAnAcquireWhoseOutcomeIsUnknownIsLeftOut(t *testing.T) {
	h := edit(t, correct, `"holds":[`, `"holds":[
 {"worker":4,"claim":{"kind":"exclusive"},"token":null,"invoked":1,"granted":null,"lost":null,"released":null,"freed_by":null},`)
	if r := check(t, h); r != porcupine.Ok {
		t.Fatalf("got %s", r)
	}
}

func TestReadersShareAndAWriterOverlappingAReaderIsIllegal(t *testing.T) {
	readers := `{"permits":1,"holds":[
 {"worker":1,"claim":{"kind":"shared"},"token":1,"invoked":5,"granted":10,"lost":null,"released":30,"freed_by":31},
 {"worker":2,"claim":{"kind":"shared"},"token":2,"invoked":6,"granted":15,"lost":null,"released":35,"freed_by":36}
 ],"writes":[]}`
	if r := check(t, readers); r != porcupine.Ok {
		t.Fatalf("readers: got %s", r)
	}
	writer := `,
 {"worker":3,"claim":{"kind":"exclusive"},"token":3,"invoked":20,"granted":%s,"lost":null,"released":50,"freed_by":51}
 ],"writes":[]}`
	after := edit(t, readers, "\n ],\"writes\":[]}", strings.Replace(writer, "%s", "37", 1))
	if r := check(t, after); r != porcupine.Ok {
		t.Fatalf("writer after the readers: got %s", r)
	}
	during := edit(t, readers, "\n ],\"writes\":[]}", strings.Replace(writer, "%s", "32", 1))
	if r := check(t, during); r != porcupine.Illegal {
		t.Fatalf("writer during a reader: got %s", r)
	}
}

func TestASemaphoreOverItsSizeIsIllegal(t *testing.T) {
	hold := func(worker, n, from, to string) string {
		return `{"worker":` + worker + `,"claim":{"kind":"permits","n":` + n + `},"token":null,"invoked":` +
			from + `,"granted":` + from + `,"lost":null,"released":` + to + `,"freed_by":` + to + `}`
	}
	within := []string{hold("1", "2", "10", "30"), hold("2", "1", "12", "20"), hold("3", "1", "21", "40")}
	h := `{"permits":3,"holds":[` + strings.Join(within, ",") + `],"writes":[]}`
	if r := check(t, h); r != porcupine.Ok {
		t.Fatalf("within the size: got %s", r)
	}
	over := append(within, hold("4", "1", "25", "28"))
	h = `{"permits":3,"holds":[` + strings.Join(over, ",") + `],"writes":[]}`
	if r := check(t, h); r != porcupine.Illegal {
		t.Fatalf("over the size: got %s", r)
	}
}

func TestAnIllegalHistoryLeavesAVisualisation(t *testing.T) {
	h, err := Read(strings.NewReader(edit(t, correct, `"token":3,"invoked":30`, `"token":1,"invoked":30`)))
	if err != nil {
		t.Fatal(err)
	}
	html := filepath.Join(t.TempDir(), "porcupine.html")
	v, err := Check(h, html, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if v.Result != porcupine.Illegal || v.HTML != html {
		t.Fatalf("got %+v", v)
	}
	if st, err := os.Stat(html); err != nil || st.Size() == 0 {
		t.Fatalf("no visualisation: %v", err)
	}
}

func TestEachLockIsCheckedOnItsOwn(t *testing.T) {
	// Two locks with the same tokens at the same times: neither overlaps nor regresses the other.
	on := func(lock string) string {
		h := strings.ReplaceAll(correct, `{"worker":`, `{"lock":"`+lock+`","worker":`)
		h = strings.TrimPrefix(h, `{"permits":1,"holds":[`)
		return h
	}
	a, b := on("a"), on("b")
	holdsA, writesA, _ := strings.Cut(a, `],
 "writes":[`)
	holdsB, writesB, _ := strings.Cut(b, `],
 "writes":[`)
	both := `{"permits":1,"holds":[` + holdsA + `,` + holdsB + `],"writes":[` +
		strings.TrimSuffix(writesA, `]}`) + `,` + writesB
	if r := check(t, both); r != porcupine.Ok {
		t.Fatalf("two locks: got %s", r)
	}
	// An overlap on one of them is still found.
	bad := strings.Replace(both, `"lock":"b","worker":2,"claim":{"kind":"exclusive"},"token":2,"invoked":8,"granted":25,"lost":null,"released":40`,
		`"lock":"b","worker":2,"claim":{"kind":"exclusive"},"token":2,"invoked":8,"granted":25,"lost":null,"released":47`, 1)
	if bad == both {
		t.Fatal("the edit did not apply")
	}
	if r := check(t, bad); r != porcupine.Illegal {
		t.Fatalf("an overlap on lock b: got %s", r)
	}
}

func TestBadHistoriesAreRefused(t *testing.T) {
	for _, bad := range []string{
		`{"permits":0,"holds":[],"writes":[]}`,
		`{"permits":1,"holds":[{"worker":1,"claim":{"kind":"both"},"token":null,"invoked":1,"granted":null,"lost":null,"released":null,"freed_by":null}],"writes":[]}`,
		`{"permits":1,"holds":[],"writes":[],"extra":1}`,
		`not json`,
	} {
		if _, err := Read(strings.NewReader(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// An independent reading of kubelet's device-manager checkpoint, built with Go's own
// encoding/json and go-spew, for the codec's differential tests (tests only).
//
// The structs, their package name (it appears in the go-spew dump that is hashed) and
// the decode targets copy kubelet's:
//   pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go   (Data, checkpointData, PodDevicesEntry, BootID)
//   pkg/kubelet/cm/devicemanager/checkpoint/checkpointv1.go (DataV1, the v1 type-name rewrite)
//   pkg/kubelet/cm/devicemanager/manager.go                 (getCheckpoint: make([]PodDevicesEntry, 0), make(map[string][]string))
//   pkg/kubelet/checkpointmanager/checksum/checksum.go + pkg/util/hash DeepHashObject (FNV-32a over spew %#v)
package checkpoint

import (
	"encoding/json"
	"hash/fnv"
	"strings"

	"github.com/davecgh/go-spew/spew"
)

type DevicesPerNUMA map[int64][]string

type PodDevicesEntry struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     DevicesPerNUMA
	AllocResp     []byte
}

type checkpointData struct {
	PodDeviceEntries  []PodDevicesEntry
	RegisteredDevices map[string][]string
}

type Data struct {
	Data     checkpointData
	Checksum uint64
	BootID   string `json:",omitempty"`
}

type PodDevicesEntryV1 struct {
	PodUID        string
	ContainerName string
	ResourceName  string
	DeviceIDs     []string
	AllocResp     []byte
}

type checkpointDataV1 struct {
	PodDeviceEntries  []PodDevicesEntryV1
	RegisteredDevices map[string][]string
}

type DataV1 struct {
	Data     checkpointDataV1
	Checksum uint64
}

var printer = spew.ConfigState{Indent: " ", SortKeys: true, DisableMethods: true, SpewKeys: true}

// Verdict is what one layout makes of a file.
type Verdict struct {
	Error    string `json:"error"`
	Stored   uint64 `json:"stored"`
	Computed uint32 `json:"computed"`
	Dump     []byte `json:"dump"`
	BootID   string `json:"boot_id"`
}

func hash(dump string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(dump))
	return h.Sum32()
}

// V2 decodes as getCheckpoint does and hashes as checksum.New does.
func V2(blob []byte) Verdict {
	cp := &Data{Data: checkpointData{PodDeviceEntries: make([]PodDevicesEntry, 0), RegisteredDevices: make(map[string][]string)}}
	if err := json.Unmarshal(blob, cp); err != nil {
		return Verdict{Error: err.Error()}
	}
	dump := printer.Sprintf("%#v", cp.Data)
	return Verdict{Stored: cp.Checksum, Computed: hash(dump), Dump: []byte(dump), BootID: cp.BootID}
}

// V1 decodes as getCheckpointV1 does and hashes as checkpointDataV1.checksum does.
func V1(blob []byte) Verdict {
	cp := &DataV1{Data: checkpointDataV1{PodDeviceEntries: make([]PodDevicesEntryV1, 0), RegisteredDevices: make(map[string][]string)}}
	if err := json.Unmarshal(blob, cp); err != nil {
		return Verdict{Error: err.Error()}
	}
	object := printer.Sprintf("%#v", cp.Data)
	object = strings.Replace(object, "checkpointDataV1", "checkpointData", 1)
	object = strings.Replace(object, "PodDevicesEntryV1", "PodDevicesEntry", -1)
	dump := printer.Sprintf("%v", object)
	return Verdict{Stored: cp.Checksum, Computed: hash(dump), Dump: []byte(dump)}
}

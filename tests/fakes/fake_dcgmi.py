# Test stand-in for DCGM's dcgmi, the one call gpuops.fleet makes: `dcgmi diag -r <level> -i <ids> -j`. It reads the
# fake node file (GPUOPS_FAKE_NVML_CONFIG) and prints NVVS's JSON as DCGM 3.x writes it (DCGM's nvvs JsonOutput and its
# test of real output): a warning line before the JSON, "DCGM GPU Diagnostic" -> test_categories -> tests -> results,
# null between tests, the software tests' gpu_ids as one CSV string for every GPU, the per-GPU tests' as one GPU each,
# status PASS (software) or Pass/Fail/Skip (per GPU), warnings as {warning, error_id}. Failures come from lines
#   dcgm_fail|<gpu index>|<test name>|<warning text>|<error id>
#   dcgm_runtime_error|<text>          (DCGM could not run the diagnostic: runtime_error, no results)
#   dcgm_version|<version>             (4.x: DCGM 4's shape, dcgmi/Diag.cpp HelperJsonBuildOutput: "DCGM Diagnostic", each
#                                       result naming its entity, entity_group GPU, entity_group_id 1, entity_id; a
#                                       test_summary per test; the version in metadata; no text before the JSON)
# and each run is recorded in <config>.dcgmi-runs (one argv a line), so a test knows it ran and with what. Exit code:
# 0 when every test passed, 226 (DCGM_ST_NVVS_ERROR as an unsigned byte: DCGM's own test of dcgmi diag expects it on a
# failure) where one failed or DCGM could not run.
import json
import os
import sys

SOFTWARE = ["Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS-related Blocks", "Persistence Mode",
            "Environmental Variables", "Page Retirement/Row Remap", "Graphics Processes", "Inforom"]
# the tests each level adds (DCGM's run levels: 1 quick, 2 medium, 3 long, 4 extended)
LEVELS = {1: [], 2: [("Integration", "PCIe"), ("Hardware", "GPU Memory")],
          3: [("Integration", "PCIe"), ("Hardware", "GPU Memory"), ("Hardware", "Diagnostic"), ("Stress", "Targeted Stress"),
              ("Stress", "Targeted Power"), ("Stress", "Memory Bandwidth")]}
LEVELS[4] = LEVELS[3] + [("Stress", "Memtest"), ("Stress", "Pulse Test")]


def main(argv):
    path = os.environ.get("GPUOPS_FAKE_NVML_CONFIG")
    if path and not os.path.exists(path) and path.startswith("/host/"):
        path = path[len("/host"):]
    if argv[:1] != ["diag"] or "-r" not in argv or "-i" not in argv or "-j" not in argv:
        sys.stdout.write("fake dcgmi: unsupported arguments %r\n" % (argv,))
        return 2
    level = int(argv[argv.index("-r") + 1])
    ids = [int(i) for i in argv[argv.index("-i") + 1].split(",")]
    records = []
    if path and os.path.exists(path):
        with open(path) as handle:
            records = [line.rstrip("\n").split("|") for line in handle]
    with open(path + ".dcgmi-runs", "a") as runs:
        runs.write(" ".join(argv) + "\n")
    errors = [r[1] for r in records if r[0] == "dcgm_runtime_error"]
    versions = [r[1] for r in records if r[0] == "dcgm_version"]
    if versions and versions[0].startswith("4."):
        return dcgm4(versions[0], level, ids, records, errors)
    if errors:
        sys.stdout.write(json.dumps({"DCGM GPU Diagnostic": {"runtime_error": errors[0], "version": "3.3.5"}}, indent=4) + "\n")
        return 226
    fails = dict(((int(r[1]), r[2]), (r[3], int(r[4]) if len(r) > 4 and r[4].isdigit() else 0)) for r in records if r[0] == "dcgm_fail")
    failed = False
    deployment = []
    for name in SOFTWARE:
        deployment.append({"name": name, "results": [{"gpu_ids": ",".join(map(str, ids)), "status": "PASS"}]})
        deployment.append(None)
    categories = [{"category": "Deployment", "tests": deployment[:-1]}]
    for category, name in LEVELS[level]:
        results = []
        for gpu in ids:
            if (gpu, name) in fails:
                text, code = fails[(gpu, name)]
                results.append({"gpu_ids": str(gpu), "status": "Fail", "warnings": [{"warning": text, "error_id": code}],
                                "info": ["GPU %d: SIMULATED" % gpu]})
                failed = True
            else:
                results.append({"gpu_ids": str(gpu), "status": "Pass"})
        found = [c for c in categories if c["category"] == category]
        if found:
            found[0]["tests"].append({"name": name, "results": results})
        else:
            categories.append({"category": category, "tests": [{"name": name, "results": results}]})
    sys.stdout.write("WARNING: the SIMULATED dcgmi of gpuops.fleet's tests\n")
    sys.stdout.write(json.dumps({"DCGM GPU Diagnostic": {"test_categories": categories, "version": "3.3.5"}}, indent=4) + "\n")
    return 226 if failed else 0


def dcgm4(version, level, ids, records, errors):
    """DCGM 4.x's JSON (dcgmi/Diag.cpp: HelperJsonBuildOutput, HelperJsonAddResult, HelperJsonAddTestSummary; the keys of
    nvvs/include/NvvsJsonStrings.h): a result names its entity, status Pass/Fail/Skip/Warn, a test_summary per test, the
    version in metadata, the entities in entity_groups."""
    out = {"DCGM Diagnostic": {}, "metadata": {"version": version, "Driver Version Detected": "570.124.06"},
           "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1,
                              "entities": [{"entity_id": gpu, "device_id": "20b0", "serial_num": "SIMULATED-%d" % gpu} for gpu in ids]}]}
    if errors:
        out["DCGM Diagnostic"]["runtime_error"] = errors[0]
        sys.stdout.write(json.dumps(out, indent=3) + "\n")
        return 226
    fails = dict(((int(r[1]), r[2]), (r[3], int(r[4]) if len(r) > 4 and r[4].isdigit() else 0)) for r in records if r[0] == "dcgm_fail")
    failed = False
    categories = [{"category": "Deployment", "tests": [{"name": "software", "results": [
        {"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu, "status": "Pass"} for gpu in ids], "test_summary": {"status": "Pass"}}]}]
    for category, name in LEVELS[level]:
        results = []
        for gpu in ids:
            result = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": gpu, "status": "Pass"}
            if (gpu, name) in fails:
                text, code = fails[(gpu, name)]
                result.update(status="Fail", warnings=[{"warning": text, "error_id": code, "error_category": 4, "error_severity": 2}],
                              info=["GPU %d: SIMULATED" % gpu])
                failed = True
            results.append(result)
        test = {"name": name, "results": results, "test_summary": {"status": "Fail" if any(r["status"] == "Fail" for r in results) else "Pass"}}
        found = [c for c in categories if c["category"] == category]
        if found:
            found[0]["tests"].append(test)
        else:
            categories.append({"category": category, "tests": [test]})
    out["DCGM Diagnostic"]["test_categories"] = categories
    sys.stdout.write(json.dumps(out, indent=3) + "\n")
    return 226 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

// The lab's records (src/report/records.h): results.jsonl, one JSON line per cell, read when a
// lab resumes and when `stretch report` merges files; the records read are then turned into the
// report's tables.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_target.h"
#include "src/report/records.h"
#include "src/report/report_html.h"

namespace stretch::fuzz {

int FuzzLabRecords(const uint8_t* data, size_t size) {
  const std::string path = WriteScratch("results.jsonl", data, size);
  ExpectErrorOrSuccess([&] {
    const LabRecordFile file = ReadLabRecords({path});
    for (const LabRecord& r : file.records) (void)LabRecordJson(r).dump();
    if (!file.records.empty()) (void)BuildReport(file, {path});
  });
  return 0;
}

}  // namespace stretch::fuzz

STRETCH_FUZZ_TARGET(stretch::fuzz::FuzzLabRecords)

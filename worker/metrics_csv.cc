#include "worker/metrics_csv.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace psync {

absl::StatusOr<std::unique_ptr<MetricsCsv>> MetricsCsv::Open(const std::string& path, int every) {
  // Appended to: a restarted worker 0 adds to its predecessor's rows.
  FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("--metrics_csv ", path, ": cannot create"));
  }
  if (std::fseek(file, 0, SEEK_END) == 0 && std::ftell(file) == 0) {
    std::fputs("kind,epoch,step,wall_s,loss,accuracy,test_loss,test_accuracy,samples_per_s\n",
               file);
  }
  return std::unique_ptr<MetricsCsv>(new MetricsCsv(path, file, every));
}

MetricsCsv::MetricsCsv(std::string path, FILE* file, int every)
    : path_(std::move(path)), file_(file), every_(every), start_(absl::Now()), last_flush_(start_) {}

MetricsCsv::~MetricsCsv() { Close().IgnoreError(); }

double MetricsCsv::WallSeconds() const { return absl::ToDoubleSeconds(absl::Now() - start_); }

void MetricsCsv::AddStep(const StepReport& r) {
  if (file_ == nullptr || r.step % every_ != 0) return;
  const double rate = r.seconds > 0 ? r.samples / r.seconds : 0;
  if (std::fprintf(file_, "step,%d,%lld,%.3f,%.6f,%.6f,,,%.1f\n", r.epoch,
                   static_cast<long long>(r.step), WallSeconds(), r.loss, r.accuracy, rate) < 0) {
    if (write_errno_ == 0) write_errno_ = errno != 0 ? errno : EIO;
  }
  // At most a second of rows in the buffer: a killed worker loses no more.
  if (absl::Now() - last_flush_ >= kFlushEvery) {
    last_flush_ = absl::Now();
    if (std::fflush(file_) != 0 && write_errno_ == 0) write_errno_ = errno != 0 ? errno : EIO;
  }
}

void MetricsCsv::AddEpoch(const EpochReport& r) {
  if (file_ == nullptr) return;
  std::string test = ",";
  if (r.test_loss >= 0) test = absl::StrCat(r.test_loss, ",", r.test_accuracy);
  if (std::fprintf(file_, "epoch,%d,%lld,%.3f,%.6f,%.6f,%s,%.1f\n", r.epoch,
                   static_cast<long long>(r.step), WallSeconds(), r.loss, r.train_accuracy,
                   test.c_str(), r.samples_per_sec) < 0 ||
      std::fflush(file_) != 0) {
    if (write_errno_ == 0) write_errno_ = errno != 0 ? errno : EIO;
  }
}

absl::Status MetricsCsv::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  if (std::fflush(file_) != 0 && write_errno_ == 0) write_errno_ = errno != 0 ? errno : EIO;
  if (std::fclose(file_) != 0 && write_errno_ == 0) write_errno_ = errno != 0 ? errno : EIO;
  file_ = nullptr;
  if (write_errno_ != 0) {
    return absl::ErrnoToStatus(write_errno_, absl::StrCat("--metrics_csv ", path_, ": write failed"));
  }
  return absl::OkStatus();
}

}  // namespace psync

#include "worker/model/cnn.h"

#include <cblas.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/model_util.h"

namespace psync {
namespace {

// Evaluation runs in slices of this many samples to bound scratch memory.
constexpr int64_t kEvalSlice = 256;

// The columns x of an output row whose source column x + kx - pad lies
// within [0, w): [*begin, *end).
void ValidColumns(int64_t kx, int64_t pad, int64_t w, int64_t* begin, int64_t* end) {
  *begin = std::clamp(pad - kx, int64_t{0}, w);
  *end = std::clamp(w + pad - kx, *begin, w);
}

// col[(c*k + ky)*k + kx][y*w + x] = in[c][y + ky - k/2][x + kx - k/2], or 0
// outside the image.
void Im2Col(const float* in, int64_t channels, int64_t h, int64_t w, int64_t k, float* col) {
  const int64_t pad = k / 2;
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t ky = 0; ky < k; ++ky) {
      for (int64_t kx = 0; kx < k; ++kx) {
        float* row = col + ((c * k + ky) * k + kx) * h * w;
        int64_t x0, x1;
        ValidColumns(kx, pad, w, &x0, &x1);
        for (int64_t y = 0; y < h; ++y) {
          float* out = row + y * w;
          const int64_t sy = y + ky - pad;
          if (sy < 0 || sy >= h) {
            std::fill(out, out + w, 0.0f);
            continue;
          }
          std::fill(out, out + x0, 0.0f);
          if (x1 > x0) {  // else the run may lie wholly outside the row
            const float* src = in + (c * h + sy) * w + (x0 + kx - pad);
            std::copy(src, src + (x1 - x0), out + x0);
          }
          std::fill(out + x1, out + w, 0.0f);
        }
      }
    }
  }
}

// The adjoint of Im2Col: adds each column entry back to its pixel, in the
// same order as a loop over every entry would.
void Col2Im(const float* col, int64_t channels, int64_t h, int64_t w, int64_t k, float* out) {
  const int64_t pad = k / 2;
  std::fill(out, out + channels * h * w, 0.0f);
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t ky = 0; ky < k; ++ky) {
      for (int64_t kx = 0; kx < k; ++kx) {
        const float* row = col + ((c * k + ky) * k + kx) * h * w;
        int64_t x0, x1;
        ValidColumns(kx, pad, w, &x0, &x1);
        if (x1 == x0) continue;  // no column of this kernel offset lands in the image
        for (int64_t y = 0; y < h; ++y) {
          const int64_t sy = y + ky - pad;
          if (sy < 0 || sy >= h) continue;
          float* dst = out + (c * h + sy) * w + (x0 + kx - pad);
          const float* src = row + y * w + x0;
          for (int64_t x = 0; x < x1 - x0; ++x) dst[x] += src[x];
        }
      }
    }
  }
}

// out[c][y][x] = max of in[c][2y..2y+1][2x..2x+1]; arg records where.
void MaxPool(const float* in, int64_t channels, int64_t h, int64_t w, float* out, int32_t* arg) {
  const int64_t oh = h / 2, ow = w / 2;
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) {
        int64_t best = (c * h + 2 * y) * w + 2 * x;
        for (int64_t d : {best + 1, best + w, best + w + 1}) {
          if (in[d] > in[best]) best = d;
        }
        out[(c * oh + y) * ow + x] = in[best];
        arg[(c * oh + y) * ow + x] = static_cast<int32_t>(best);
      }
    }
  }
}

// z[rows, cols] = w[rows, inner] * col[inner, cols] + bias per row, then ReLU.
void ConvForward(const float* w, const float* bias, const float* col, int64_t rows,
                 int64_t inner, int64_t cols, float* z) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, cols, inner, 1.0f, w, inner, col,
              cols, 0.0f, z, cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < cols; ++i) z[r * cols + i] = std::max(0.0f, z[r * cols + i] + bias[r]);
  }
}

// out[n, outs] = ReLU?(in[n, ins] * w[outs, ins]^T + b).
void Dense(const float* in, const float* w, const float* b, int64_t n, int64_t ins, int64_t outs,
           bool relu, float* out) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, outs, ins, 1.0f, in, ins, w, ins, 0.0f,
              out, outs);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < outs; ++j) {
      const float v = out[i * outs + j] + b[j];
      out[i * outs + j] = relu ? std::max(0.0f, v) : v;
    }
  }
}

// Gradients of Dense given dout [n, outs]: dw = dout^T in, db = column sums
// of dout (added to dw and db when `accumulate`), and (if din) din = dout w.
void DenseBackward(const float* in, const float* w, const float* dout, int64_t n, int64_t ins,
                   int64_t outs, float* dw, float* db, float* din, bool accumulate) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, outs, ins, n, 1.0f, dout, outs, in, ins,
              accumulate ? 1.0f : 0.0f, dw, ins);
  if (!accumulate) std::fill(db, db + outs, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < outs; ++j) db[j] += dout[i * outs + j];
  }
  if (din != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, ins, outs, 1.0f, dout, outs, w, ins,
                0.0f, din, ins);
  }
}

// Backward through max-pool and ReLU into dz (size of the conv output),
// then dw += dz col^T, db += row sums, and (if dcol) dcol = w^T dz.
void ConvBackward(const float* dpooled, const int32_t* arg, const float* a, int64_t pooled_size,
                  const float* w, const float* col, int64_t rows, int64_t inner, int64_t cols,
                  float* dz, float* dw, float* db, float* dcol) {
  std::fill(dz, dz + rows * cols, 0.0f);
  for (int64_t i = 0; i < pooled_size; ++i) dz[arg[i]] = dpooled[i];
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (a[i] <= 0.0f) dz[i] = 0.0f;  // ReLU: a > 0 exactly where z > 0
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, inner, cols, 1.0f, dz, cols, col,
              cols, 1.0f, dw, inner);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < cols; ++i) db[r] += dz[r * cols + i];
  }
  if (dcol != nullptr) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, inner, cols, rows, 1.0f, w, inner, dz,
                cols, 0.0f, dcol, cols);
  }
}

}  // namespace

CnnConfig CnnConfigOf(const ModelSpec& spec) {
  CnnConfig c;
  if (spec.widths.size() == 3) {
    c.conv1_channels = spec.widths[0];
    c.conv2_channels = spec.widths[1];
    c.hidden = spec.widths[2];
  }
  return c;
}

absl::Status CnnConfig::Validate() const {
  for (int64_t v : {height, width, in_channels, conv1_channels, conv2_channels, kernel, hidden,
                    classes}) {
    if (v < 1 || v > 4096) {
      return absl::InvalidArgumentError(absl::StrCat("CnnConfig: a size is ", v,
                                                     ", expected 1..4096"));
    }
  }
  if (kernel % 2 == 0 || height % 4 != 0 || width % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CnnConfig: kernel ", kernel, " must be odd and the image (", height, " x ", width,
        ") divisible by 4"));
  }
  if (classes > 256) {
    return absl::InvalidArgumentError(absl::StrCat("CnnConfig: ", classes,
                                                   " classes, labels are bytes (at most 256)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CpuCnn>> CpuCnn::Create(const CnnConfig& config) {
  PSYNC_RETURN_IF_ERROR(config.Validate());
  return std::unique_ptr<CpuCnn>(new CpuCnn(config));
}

CpuCnn::CpuCnn(const CnnConfig& c)
    : c_(c),
      hw1_(c.height * c.width),
      hw2_(hw1_ / 4),
      hw4_(hw1_ / 16),
      kk1_(c.in_channels * c.kernel * c.kernel),
      kk2_(c.conv1_channels * c.kernel * c.kernel),
      flat_(c.conv2_channels * hw4_) {
  params_ = CnnParameters(c);
  offsets_ = TensorOffsets(params_);
}

std::vector<TensorSpec> CnnParameters(const CnnConfig& c) {
  const int64_t flat = c.conv2_channels * (c.height / 4) * (c.width / 4);
  return {{"conv1.weight", {c.conv1_channels, c.in_channels, c.kernel, c.kernel}},
          {"conv1.bias", {c.conv1_channels}},
          {"conv2.weight", {c.conv2_channels, c.conv1_channels, c.kernel, c.kernel}},
          {"conv2.bias", {c.conv2_channels}},
          {"fc1.weight", {c.hidden, flat}},
          {"fc1.bias", {c.hidden}},
          {"fc2.weight", {c.classes, c.hidden}},
          {"fc2.bias", {c.classes}}};
}

void CpuCnn::EnsureScratch(int64_t n) {
  if (n <= rows_) return;
  const int64_t c1 = c_.conv1_channels, c2 = c_.conv2_channels;
  col1_.resize(n * kk1_ * hw1_);
  col2_.resize(n * kk2_ * hw2_);
  a1_.resize(n * c1 * hw1_);
  a2_.resize(n * c2 * hw2_);
  arg1_.resize(n * c1 * hw2_);
  arg2_.resize(n * c2 * hw4_);
  p1_.resize(n * c1 * hw2_);
  p2_.resize(n * flat_);
  h_.resize(n * c_.hidden);
  logits_.resize(n * c_.classes);
  dlogits_.resize(n * c_.classes);
  dh_.resize(n * c_.hidden);
  dp2_.resize(n * flat_);
  dp1_.resize(n * c1 * hw2_);
  dz_.resize(std::max(c1 * hw1_, c2 * hw2_));
  dcol_.resize(kk2_ * hw2_);
  rows_ = n;
}

void CpuCnn::Forward(const float* weights, const float* inputs, int64_t n) {
  EnsureScratch(n);
  const int64_t c1 = c_.conv1_channels, c2 = c_.conv2_channels, k = c_.kernel;
  for (int64_t i = 0; i < n; ++i) {
    float* col1 = col1_.data() + i * kk1_ * hw1_;
    float* col2 = col2_.data() + i * kk2_ * hw2_;
    float* a1 = a1_.data() + i * c1 * hw1_;
    float* a2 = a2_.data() + i * c2 * hw2_;
    float* p1 = p1_.data() + i * c1 * hw2_;
    Im2Col(inputs + i * input_dim(), c_.in_channels, c_.height, c_.width, k, col1);
    ConvForward(param(weights, 0), param(weights, 1), col1, c1, kk1_, hw1_, a1);
    MaxPool(a1, c1, c_.height, c_.width, p1, arg1_.data() + i * c1 * hw2_);
    Im2Col(p1, c1, c_.height / 2, c_.width / 2, k, col2);
    ConvForward(param(weights, 2), param(weights, 3), col2, c2, kk2_, hw2_, a2);
    MaxPool(a2, c2, c_.height / 2, c_.width / 2, p2_.data() + i * flat_,
            arg2_.data() + i * c2 * hw4_);
  }
  Dense(p2_.data(), param(weights, 4), param(weights, 5), n, flat_, c_.hidden, true, h_.data());
  Dense(h_.data(), param(weights, 6), param(weights, 7), n, c_.hidden, c_.classes, false,
        logits_.data());
}

absl::StatusOr<BatchStats> CpuCnn::Evaluate(const float* weights, const Batch& batch) {
  PSYNC_RETURN_IF_ERROR(ValidateBatch("CpuCnn::Evaluate", weights, batch, c_.classes));
  return EvaluateInSlices(batch, input_dim(), kEvalSlice,
                          [&](const Batch& slice) -> absl::StatusOr<BatchStats> {
                            Forward(weights, slice.inputs, slice.n);
                            return SoftmaxCrossEntropy(logits_.data(), slice, c_.classes, nullptr);
                          });
}

absl::StatusOr<BatchStats> CpuCnn::DoComputeGradients(const float* weights, const Batch& batch,
                                                      float* grad,
                                                      const GradientsReady& ready, bool accumulate) {
  if (grad == nullptr) return absl::InvalidArgumentError("CpuCnn::ComputeGradients: grad is null");
  PSYNC_RETURN_IF_ERROR(ValidateBatch("CpuCnn::ComputeGradients", weights, batch, c_.classes));
  const int num_tensors = static_cast<int>(params_.size());
  if (batch.n == 0) {
    if (!accumulate) std::fill(grad, grad + num_parameters(), 0.0f);
    if (ready) ready(0, num_tensors);
    return BatchStats{};
  }
  const int64_t n = batch.n, c1 = c_.conv1_channels, c2 = c_.conv2_channels;
  Forward(weights, batch.inputs, n);
  const BatchStats stats =
      SoftmaxCrossEntropy(logits_.data(), batch, c_.classes, dlogits_.data());
  auto g = [&](int index) { return grad + offsets_[index]; };

  DenseBackward(h_.data(), param(weights, 6), dlogits_.data(), n, c_.hidden, c_.classes, g(6),
                g(7), dh_.data(), accumulate);
  if (ready) ready(6, 8);
  for (int64_t i = 0; i < n * c_.hidden; ++i) {
    if (h_[i] <= 0.0f) dh_[i] = 0.0f;
  }
  DenseBackward(p2_.data(), param(weights, 4), dh_.data(), n, flat_, c_.hidden, g(4), g(5),
                dp2_.data(), accumulate);
  if (ready) ready(4, 6);

  // ConvBackward adds each sample's conv gradients.
  if (!accumulate) std::fill(g(2), g(4), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    ConvBackward(dp2_.data() + i * flat_, arg2_.data() + i * c2 * hw4_,
                 a2_.data() + i * c2 * hw2_, c2 * hw4_, param(weights, 2),
                 col2_.data() + i * kk2_ * hw2_, c2, kk2_, hw2_, dz_.data(), g(2), g(3),
                 dcol_.data());
    Col2Im(dcol_.data(), c1, c_.height / 2, c_.width / 2, c_.kernel, dp1_.data() + i * c1 * hw2_);
  }
  if (ready) ready(2, 4);
  if (!accumulate) std::fill(g(0), g(2), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    ConvBackward(dp1_.data() + i * c1 * hw2_, arg1_.data() + i * c1 * hw2_,
                 a1_.data() + i * c1 * hw1_, c1 * hw2_, param(weights, 0),
                 col1_.data() + i * kk1_ * hw1_, c1, kk1_, hw1_, dz_.data(), g(0), g(1), nullptr);
  }
  if (ready) ready(0, 2);
  return stats;
}

}  // namespace psync

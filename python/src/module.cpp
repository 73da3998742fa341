// _tccl: the extension module behind the `tccl` Python package (python/tccl/__init__.py
// is the public API; docs/python.md describes it).
//
// - Buffers come in through the buffer protocol and are used in place: the collective
//   reads and writes the caller's memory (numpy arrays; torch CPU tensors arrive as the
//   numpy views that share their storage). Non-contiguous, read-only, big-endian and
//   unsupported element types are refused before anything is sent.
// - The GIL is released while a call runs (and while a communicator is built, which
//   waits for the other ranks), so other Python threads go on.
// - tccl::Error becomes the Python class registered for its kind by tccl/__init__.py,
//   with every ErrorInfo field as an attribute (None when unknown).
// - An asynchronous call's Work holds its buffers (and the communicator) until it is
//   completed and dropped; dropping an unfinished Work waits for it first, because the
//   collective is still writing into memory Python would otherwise free. The Python side
//   keeps the Works of an open point-to-point group until groupEnd, since the
//   operations are not posted before (and issues blocking send/recv there as async ones).
// - What each collective's buffers must hold on this rank, which ranks have them, and the
//   in-place rules come from the collective table (src/algorithms/collective_spec.hpp),
//   the one the communicator validates against: the checks here only say it earlier, in
//   Python's terms.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/collective_spec.hpp"
#include "tccl/communicator.hpp"
#include "tccl/error.hpp"
#include "tccl/store.hpp"
#include "tccl/types.hpp"
#include "tccl/work.hpp"

namespace py = pybind11;
namespace cs = tccl::algo;  // the collective table

namespace {

using CommPtr = std::shared_ptr<tccl::Communicator>;
using Millis = std::chrono::milliseconds;

// ---- errors ---------------------------------------------------------------------------

constexpr size_t kNumKinds = static_cast<size_t>(tccl::ErrorKind::Aborted) + 1;
// The Python class of each ErrorKind, registered once by tccl/__init__.py. Deliberately
// leaked references: the classes live as long as the interpreter.
std::array<PyObject*, kNumKinds> gErrorClasses{};

py::object orNone(int64_t v) { return v < 0 ? py::none() : py::object(py::int_(v)); }
py::object orNone(const std::string& s) { return s.empty() ? py::none() : py::object(py::str(s)); }

void setErrorFields(py::object& exc, const tccl::ErrorInfo& i) {
  exc.attr("kind") = py::str(std::string(tccl::toString(i.kind)));
  exc.attr("message") = py::str(i.message);
  exc.attr("rank") = orNone(i.rank);
  exc.attr("peer") = orNone(i.peer);
  exc.attr("peer_address") = orNone(i.peerAddress);
  exc.attr("collective") = orNone(i.collective);
  exc.attr("seq") = orNone(i.seq);
  exc.attr("algorithm") = orNone(i.algorithm);
  exc.attr("phase") = orNone(i.phase);
  exc.attr("step") = orNone(i.step);
  exc.attr("steps") = orNone(i.steps);
  exc.attr("bytes_moved") = orNone(i.bytesMoved);
  exc.attr("bytes_expected") = orNone(i.bytesExpected);
  exc.attr("elapsed_ms") = orNone(i.elapsedMs);
  exc.attr("timeout_ms") = orNone(i.timeoutMs);
  exc.attr("culprit") = orNone(i.culprit);
  exc.attr("culprit_address") = orNone(i.culpritAddress);
  exc.attr("detected_by") = orNone(i.detectedBy);
  exc.attr("local_signature") = orNone(i.localSignature);
  exc.attr("remote_signature") = orNone(i.remoteSignature);
  // A sub-communicator's ranks in its parent's and the world's numbering (else None).
  exc.attr("rank_parent") = orNone(i.rankAlso.parent);
  exc.attr("rank_world") = orNone(i.rankAlso.world);
  exc.attr("peer_parent") = orNone(i.peerAlso.parent);
  exc.attr("peer_world") = orNone(i.peerAlso.world);
  exc.attr("culprit_parent") = orNone(i.culpritAlso.parent);
  exc.attr("culprit_world") = orNone(i.culpritAlso.world);
}

PyObject* errorClass(tccl::ErrorKind kind) {
  const auto k = static_cast<size_t>(kind);
  return k < kNumKinds && gErrorClasses[k] != nullptr ? gErrorClasses[k] : PyExc_RuntimeError;
}

// The Python exception object (not raised) for an error.
py::object makeError(const tccl::ErrorInfo& info, const std::string& what) {
  PyObject* cls = errorClass(info.kind);
  py::object exc = py::reinterpret_borrow<py::object>(cls)(py::str(what));
  if (cls != PyExc_RuntimeError) setErrorFields(exc, info);
  return exc;
}

// Registered with pybind11, which shares translators between modules: a tccl::Error
// escaping from the torch backend's work becomes the same Python class.
void translateError(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const tccl::Error& e) {
    try {
      py::object exc = makeError(e.info(), e.what());
      PyErr_SetObject(errorClass(e.kind()), exc.ptr());
    } catch (py::error_already_set& failed) {
      failed.restore();  // building the exception failed: report that instead
    }
  }
}

[[noreturn]] void invalid(const std::string& msg, int rank = -1) {
  tccl::throwError(tccl::ErrorKind::InvalidArgument, "tccl: " + msg, rank);
}

// ---- buffers --------------------------------------------------------------------------

// The element type a buffer-protocol format string describes, if tccl carries it.
std::optional<tccl::DataType> dataTypeOfFormat(const char* format, Py_ssize_t itemsize,
                                               std::string* why) {
  std::string f = format ? format : "B";
  if (!f.empty() && (f[0] == '>' || f[0] == '!')) {
    *why = "big-endian elements";
    return std::nullopt;
  }
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f.erase(0, 1);
  if (f.size() != 1) {
    *why = "element format '" + f + "'";
    return std::nullopt;
  }
  switch (f[0]) {
    case 'f':
      return tccl::DataType::Float32;
    case 'd':
      return tccl::DataType::Float64;
    case 'e':
      return tccl::DataType::Float16;
    case 'b':
      return tccl::DataType::Int8;
    case 'B':
      return tccl::DataType::UInt8;
    case 'i':
    case 'l':
    case 'q':
      if (itemsize == 4) return tccl::DataType::Int32;
      if (itemsize == 8) return tccl::DataType::Int64;
      break;
    default:
      break;
  }
  *why = "element format '" + f + "' (" + std::to_string(itemsize) + " bytes)";
  return std::nullopt;
}

// One Py_buffer, held while a call uses the memory. Create and destroy with the GIL.
class Buffer {
 public:
  // what: how error messages name it ("tensor", "output"). dtype: the element type to
  // use instead of the one the format says (bfloat16 arrives as 2-byte integers).
  Buffer(py::handle obj, bool writable, const char* what, std::optional<tccl::DataType> dtype,
         int rank) {
    if (PyObject_GetBuffer(obj.ptr(), &held_.view, PyBUF_RECORDS_RO) != 0) {
      PyErr_Clear();
      throw py::type_error(std::string("tccl: ") + what +
                           " must be a numpy array, a CPU torch tensor or another object with "
                           "the buffer protocol, not " +
                           std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
    }
    held_.held = true;
    const Py_buffer& view = held_.view;
    if (writable && view.readonly) {
      invalid(std::string(what) +
                  " is read-only, and the collective writes its result into it in place; "
                  "pass a writable array (e.g. a copy)",
              rank);
    }
    if (!PyBuffer_IsContiguous(&view, 'C')) {
      invalid(std::string(what) +
                  " is not contiguous; tccl works in place on C-contiguous memory only (use "
                  "numpy.ascontiguousarray(x) or tensor.contiguous(), and copy back)",
              rank);
    }
    std::string why;
    if (dtype) {
      if (!tccl::isValid(*dtype)) invalid("invalid dtype", rank);
      if (static_cast<size_t>(view.itemsize) != tccl::dataTypeSize(*dtype)) {
        invalid(std::string(what) + " has " + std::to_string(view.itemsize) +
                    "-byte elements, but dtype " + std::string(tccl::toString(*dtype)) + " needs " +
                    std::to_string(tccl::dataTypeSize(*dtype)),
                rank);
      }
      dtype_ = *dtype;
    } else if (auto t = dataTypeOfFormat(view.format, view.itemsize, &why)) {
      dtype_ = *t;
    } else {
      invalid(std::string(what) + " has an unsupported element type (" + why +
                  "); tccl carries float32, float64, float16, bfloat16, int32, int64, int8 "
                  "and uint8",
              rank);
    }
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return held_.view.buf; }
  size_t count() const { return static_cast<size_t>(held_.view.len / held_.view.itemsize); }
  tccl::DataType dtype() const { return dtype_; }

 private:
  // A member, so that the view is released when the constructor throws after taking it.
  struct Held {
    Py_buffer view{};
    bool held = false;
    Held() = default;
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    ~Held() {
      if (held) PyBuffer_Release(&view);
    }
  };
  Held held_;
  tccl::DataType dtype_ = tccl::DataType::UInt8;
};
using BufferPtr = std::unique_ptr<Buffer>;

// ---- works ----------------------------------------------------------------------------

py::dict toDict(const tccl::PeerCounters& c) {
  py::dict d;
  d["payload_sent"] = c.payloadSent;
  d["payload_recv"] = c.payloadRecv;
  d["wire_sent"] = c.wireSent;
  d["wire_recv"] = c.wireRecv;
  d["messages_sent"] = c.messagesSent;
  d["messages_recv"] = c.messagesRecv;
  return d;
}

py::dict toDict(const tccl::CommStats& s) {
  py::dict d;
  d["total"] = toDict(s.total());
  py::dict peers;
  for (const auto& [peer, c] : s.perPeer) peers[py::int_(peer)] = toDict(c);
  d["per_peer"] = peers;
  return d;
}

py::dict toDict(const tccl::CallStats& s) {
  py::dict d;
  d["collective"] = s.collective;
  d["algorithm"] = s.algorithm;
  d["seq"] = s.seq;
  d["count"] = s.count;
  d["bytes"] = s.bytes;
  d["segment_bytes"] = s.segmentBytes;
  d["seconds"] = s.seconds;
  d["traffic"] = toDict(s.traffic);
  return d;
}

class PyWork {
 public:
  PyWork(tccl::WorkPtr work, CommPtr comm, std::vector<BufferPtr> buffers)
      : work_(std::move(work)), comm_(std::move(comm)), buffers_(std::move(buffers)) {}
  ~PyWork() {
    if (work_ && !work_->isCompleted()) {
      py::gil_scoped_release nogil;
      try {
        work_->wait();
      } catch (...) {  // nobody is left to see it
      }
    }
    buffers_.clear();  // with the GIL
  }
  PyWork(const PyWork&) = delete;
  PyWork& operator=(const PyWork&) = delete;

  // Rethrows the collective's error. With a timeout (ms), TimeoutError if not done by
  // then (the collective goes on).
  bool wait(std::optional<int64_t> timeoutMs) {
    {
      py::gil_scoped_release nogil;
      if (timeoutMs)
        work_->wait(Millis(*timeoutMs));
      else
        work_->wait();
    }
    buffers_.clear();
    return true;
  }
  bool isCompleted() const { return work_->isCompleted(); }
  bool isSuccess() const { return done(); }
  py::object stats() const {
    if (!work_->isCompleted()) return py::none();
    return toDict(work_->stats());
  }
  int64_t seq() const { return work_->seq(); }
  // A receive's sender and tag once it completed successfully; None before, and for
  // anything else.
  py::object source() const { return done() ? orNone(work_->source()) : py::none(); }
  py::object tag() const { return done() ? orNone(work_->tag()) : py::none(); }

 private:
  bool done() const { return work_->isCompleted() && !work_->exception(); }

  tccl::WorkPtr work_;
  CommPtr comm_;
  std::vector<BufferPtr> buffers_;
};

// ---- communicators --------------------------------------------------------------------

// Destroying a communicator may wait (its progress thread drains; the rank hosting the
// store waits for the others to leave): never with the GIL held.
void deleteComm(tccl::Communicator* c) {
  if (PyGILState_Check()) {
    py::gil_scoped_release nogil;
    delete c;
  } else {
    delete c;
  }
}

tccl::CommOptions commOptions(std::optional<int64_t> timeoutMs, const std::string& name,
                              const std::string& listenAddress, size_t segmentBytes) {
  tccl::CommOptions o;
  if (timeoutMs) o.timeout = Millis(*timeoutMs);
  o.name = name;
  o.listenAddress = listenAddress;
  o.segmentBytes = segmentBytes;
  return o;
}

tccl::CollectiveOptions callOptions(std::optional<int64_t> timeoutMs, tccl::Algorithm algorithm) {
  tccl::CollectiveOptions o;
  o.algorithm = algorithm;
  if (timeoutMs) o.timeout = Millis(*timeoutMs);
  return o;
}

// Runs one call without the GIL: blocking (returns None) or asynchronous (returns a
// Work that keeps the buffers). issue(comm, async) returns the Work of an async call.
template <typename Issue>
py::object execute(const CommPtr& comm, std::vector<BufferPtr> buffers, bool async, Issue&& issue) {
  tccl::WorkPtr work;
  {
    py::gil_scoped_release nogil;
    work = issue(*comm, async);
  }
  if (!async) return py::none();
  return py::cast(new PyWork(std::move(work), comm, std::move(buffers)),
                  py::return_value_policy::take_ownership);
}

BufferPtr take(py::handle obj, bool writable, const char* what, std::optional<tccl::DataType> dtype,
               const tccl::Communicator& c) {
  return std::make_unique<Buffer>(obj, writable, what, dtype, c.rank());
}

void sameType(const Buffer& a, const Buffer& b, const tccl::Communicator& c) {
  if (a.dtype() != b.dtype()) {
    invalid("input and output element types differ (" + std::string(tccl::toString(a.dtype())) +
                " vs " + std::string(tccl::toString(b.dtype())) + ")",
            c.rank());
  }
}

// Errors name the collective as the communicator's do ("allgather: output ...").
std::string named(cs::Collective coll, const std::string& msg) {
  return std::string(cs::spec(coll).name) + ": " + msg;
}

void checkCount(cs::Collective coll, size_t got, size_t want, const char* what,
                const tccl::Communicator& c) {
  if (got != want) {
    invalid(named(coll, std::string(what) + " has " + std::to_string(got) + " elements, expected " +
                            std::to_string(want)),
            c.rank());
  }
}

// The elements `coll`'s input (output) must have on this rank for a per-block count.
size_t wantIn(cs::Collective coll, size_t count, const tccl::Communicator& c, int root = -1) {
  return cs::inputElems(coll, count, c.size(), c.rank(), root);
}
size_t wantOut(cs::Collective coll, size_t count, const tccl::Communicator& c, int root = -1) {
  return cs::outputElems(coll, count, c.size(), c.rank(), root);
}

// The per-block count of a buffer of `total` elements that holds `extent` (the table's
// N-block buffers: a multiple of the world size).
size_t countOf(cs::Collective coll, cs::Extent extent, size_t total, const char* what,
               const tccl::Communicator& c) {
  const size_t blocks = cs::elemsOf(extent, 1, c.size(), 0, 0);
  if (blocks > 1 && total % blocks != 0) {
    invalid(
        named(coll, std::string(what) + " has " + std::to_string(total) +
                        " elements, not a multiple of the world size " + std::to_string(blocks)),
        c.rank());
  }
  return blocks > 1 ? total / blocks : total;
}

// Refuses the in-place layouts the collective has not got.
void checkPlacement(cs::Collective coll, const void* in, const void* out, size_t count,
                    tccl::DataType t, const tccl::Communicator& c, int root = -1) {
  if (cs::classify(coll, in, out, count, tccl::dataTypeSize(t), c.size(), c.rank(), root) ==
      cs::Placement::InPlaceRefused) {
    invalid(named(coll, "cannot run in place: pass distinct input and output"), c.rank());
  }
}

using OptDt = std::optional<tccl::DataType>;
using OptMs = std::optional<int64_t>;

using Sizes = std::vector<size_t>;

Sizes packedOr(const Sizes& counts, const Sizes& displs) {
  if (!displs.empty()) return displs;
  Sizes d(counts.size(), 0);
  for (size_t p = 1; p < counts.size(); ++p) d[p] = d[p - 1] + counts[p - 1];
  return d;
}

// One uneven call: checks that the arrays hold what the counts say (the communicator
// checks the counts themselves), then runs it.
py::object unevenCall(const CommPtr& c, const std::string& kind, py::handle send, py::handle recv,
                      size_t count, const Sizes& sc, const Sizes& sd, const Sizes& rc,
                      const Sizes& rd, int root, tccl::ReduceOp op, bool async, OptMs timeoutMs,
                      OptDt dt) {
  const auto coll = cs::parseCollective(kind);
  if (!coll || !cs::spec(*coll).uneven) invalid("unknown uneven collective " + kind, c->rank());
  cs::VCounts v{sc, packedOr(sc, sd), rc, packedOr(rc, rd)};
  cs::BuildArgs a;
  a.collective = *coll;
  a.rank = c->rank();
  a.n = c->size();
  a.root = root;
  a.count = count;
  a.v = &v;
  std::vector<BufferPtr> b;
  const void* s = nullptr;
  void* r = nullptr;
  std::optional<tccl::DataType> t = dt;
  auto need = [&](py::handle obj, bool writable, const char* what, size_t elems) -> uint8_t* {
    if (obj.is_none()) {
      if (elems > 0) invalid(named(*coll, std::string("needs an ") + what), c->rank());
      return nullptr;
    }
    b.push_back(take(obj, writable, what, t, *c));
    if (!t) t = b.back()->dtype();
    if (b.back()->dtype() != *t) sameType(*b.front(), *b.back(), *c);
    if (b.back()->count() < elems) {
      invalid(named(*coll, std::string(what) + " has " + std::to_string(b.back()->count()) +
                               " elements, the counts need " + std::to_string(elems)),
              c->rank());
    }
    return static_cast<uint8_t*>(b.back()->data());
  };
  // The sizes need the counts to be well formed first (else the communicator says why).
  const bool sizable = !cs::checkCounts(a, 1).has_value();
  s = need(send, false, "input", sizable ? cs::inputElems(a) : 0);
  r = need(recv, true, "output", sizable ? cs::outputElems(a) : 0);
  const auto type = t.value_or(tccl::DataType::Float32);
  const auto o = callOptions(timeoutMs, tccl::Algorithm::Auto);
  return execute(c, std::move(b), async, [&, s, r](tccl::Communicator& k, bool as) {
    switch (*coll) {
      case cs::Collective::AllGatherV:
        if (as) return k.allGatherVAsync(s, count, r, v.recvCounts, v.recvDispls, type, o);
        k.allGatherV(s, count, r, v.recvCounts, v.recvDispls, type, o);
        break;
      case cs::Collective::ReduceScatterV:
        if (as) return k.reduceScatterVAsync(s, r, v.recvCounts, type, op, o);
        k.reduceScatterV(s, r, v.recvCounts, type, op, o);
        break;
      case cs::Collective::AllToAllV:
        if (as) {
          return k.allToAllVAsync(s, v.sendCounts, v.sendDispls, r, v.recvCounts, v.recvDispls,
                                  type, o);
        }
        k.allToAllV(s, v.sendCounts, v.sendDispls, r, v.recvCounts, v.recvDispls, type, o);
        break;
      case cs::Collective::GatherV:
        if (as) return k.gatherVAsync(s, count, r, v.recvCounts, v.recvDispls, type, root, o);
        k.gatherV(s, count, r, v.recvCounts, v.recvDispls, type, root, o);
        break;
      default:
        if (as) return k.scatterVAsync(s, v.sendCounts, v.sendDispls, r, count, type, root, o);
        k.scatterV(s, v.sendCounts, v.sendDispls, r, count, type, root, o);
        break;
    }
    return tccl::WorkPtr();
  });
}

void bindCommunicator(py::module_& m) {
  py::class_<tccl::Communicator, CommPtr>(m, "_Communicator")
      .def(py::init([](std::shared_ptr<tccl::Store> store, int rank, int size, OptMs timeoutMs,
                       const std::string& name, const std::string& listenAddress,
                       size_t segmentBytes) {
             auto opts = commOptions(timeoutMs, name, listenAddress, segmentBytes);
             py::gil_scoped_release nogil;
             return CommPtr(new tccl::Communicator(std::move(store), rank, size, opts), deleteComm);
           }),
           py::arg("store"), py::arg("rank"), py::arg("world_size"),
           py::arg("timeout_ms") = py::none(), py::arg("name") = "default",
           py::arg("listen_address") = "", py::arg("segment_bytes") = 0)
      .def_static(
          "from_env",
          [](OptMs timeoutMs, const std::string& name, const std::string& listenAddress,
             size_t segmentBytes) {
            auto opts = commOptions(timeoutMs, name, listenAddress, segmentBytes);
            py::gil_scoped_release nogil;
            return CommPtr(new tccl::Communicator(tccl::Communicator::fromEnv(opts)), deleteComm);
          },
          py::arg("timeout_ms") = py::none(), py::arg("name") = "default",
          py::arg("listen_address") = "", py::arg("segment_bytes") = 0)
      .def_property_readonly("rank", &tccl::Communicator::rank)
      .def_property_readonly("size", &tccl::Communicator::size)
      .def_property_readonly("sequence", &tccl::Communicator::sequence)
      .def_property_readonly("listen_address", &tccl::Communicator::listenAddress)
      .def_property_readonly("store", &tccl::Communicator::store)
      .def("abort", &tccl::Communicator::abort, py::arg("reason") = "aborted by the application",
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("aborted", &tccl::Communicator::aborted)
      .def("abort_cause",
           [](const tccl::Communicator& c) -> py::object {
             auto info = c.abortCause();
             if (!info) return py::none();
             return makeError(*info, tccl::Error::format(*info));
           })
      .def(
          "shrink",
          [](tccl::Communicator& c, OptMs timeoutMs) {
            std::optional<Millis> t;
            if (timeoutMs) t = Millis(*timeoutMs);
            py::gil_scoped_release nogil;
            return CommPtr(new tccl::Communicator(c.shrink(t)), deleteComm);
          },
          py::arg("timeout_ms") = py::none())
      .def_property_readonly("original_ranks", &tccl::Communicator::originalRanks)
      .def(
          "split",
          [](tccl::Communicator& c, std::optional<int> color, int key) -> py::object {
            std::optional<tccl::Communicator> child;
            {
              py::gil_scoped_release nogil;
              child = c.split(color.value_or(tccl::Communicator::kNoColor), key);
            }
            if (!child) return py::none();
            return py::cast(CommPtr(new tccl::Communicator(std::move(*child)), deleteComm));
          },
          py::arg("color"), py::arg("key") = 0)
      .def_property_readonly("parent_ranks", &tccl::Communicator::parentRanks)
      .def_property_readonly("world_ranks", &tccl::Communicator::worldRanks)
      .def_property_readonly("attached_communicators", &tccl::Communicator::attachedCommunicators)
      .def_readonly_static("NO_COLOR", &tccl::Communicator::kNoColor)
      .def("stats", [](const tccl::Communicator& c) { return toDict(c.stats()); })
      .def("reset_stats", &tccl::Communicator::resetStats)
      .def("last_call", [](const tccl::Communicator& c) { return toDict(c.lastCall()); })
      .def("link_model",
           [](const tccl::Communicator& c) {
             auto l = c.linkModel();
             return py::make_tuple(l.alphaUs, l.gbps);
           })
      .def("choose_allreduce_algorithm",
           [](const tccl::Communicator& c, size_t bytes) {
             std::string why;
             auto a = c.chooseAllreduceAlgorithm(bytes, &why);
             return py::make_tuple(std::string(tccl::toString(a)), why);
           })
      // recv None: in place.
      .def(
          "allreduce",
          [](const CommPtr& c, py::handle send, py::handle recv, tccl::ReduceOp op, bool async,
             OptMs timeoutMs, tccl::Algorithm algo, OptDt dt) {
            std::vector<BufferPtr> b;
            const bool inPlace = recv.is_none();
            b.push_back(take(send, inPlace, inPlace ? "tensor" : "input", dt, *c));
            if (!inPlace) {
              b.push_back(take(recv, true, "output", dt, *c));
              sameType(*b[0], *b[1], *c);
              checkCount(cs::Collective::AllReduce, b[1]->count(),
                         wantOut(cs::Collective::AllReduce, b[0]->count(), *c), "output", *c);
            }
            const void* s = b[0]->data();
            void* r = b.back()->data();
            const size_t n = b[0]->count();
            const auto t = b[0]->dtype();
            const auto o = callOptions(timeoutMs, algo);
            return execute(c, std::move(b), async, [&](tccl::Communicator& k, bool a) {
              if (a) return k.allreduceAsync(s, r, n, t, op, o);
              k.allreduce(s, r, n, t, op, o);
              return tccl::WorkPtr();
            });
          },
          py::arg("send"), py::arg("recv"), py::arg("op"), py::arg("async_op"),
          py::arg("timeout_ms"), py::arg("algorithm"), py::arg("dtype"))
      .def(
          "reduce_scatter",
          [](const CommPtr& c, py::handle send, py::handle recv, tccl::ReduceOp op, bool async,
             OptMs timeoutMs, tccl::Algorithm algo, OptDt dt) {
            std::vector<BufferPtr> b;
            b.push_back(take(send, false, "input", dt, *c));
            b.push_back(take(recv, true, "output", dt, *c));
            sameType(*b[0], *b[1], *c);
            checkCount(cs::Collective::ReduceScatter, b[0]->count(),
                       wantIn(cs::Collective::ReduceScatter, b[1]->count(), *c),
                       "input (world size x output)", *c);
            const void* s = b[0]->data();
            void* r = b[1]->data();
            const size_t n = b[1]->count();
            const auto t = b[0]->dtype();
            const auto o = callOptions(timeoutMs, algo);
            return execute(c, std::move(b), async, [&](tccl::Communicator& k, bool a) {
              if (a) return k.reduceScatterAsync(s, r, n, t, op, o);
              k.reduceScatter(s, r, n, t, op, o);
              return tccl::WorkPtr();
            });
          },
          py::arg("send"), py::arg("recv"), py::arg("op"), py::arg("async_op"),
          py::arg("timeout_ms"), py::arg("algorithm"), py::arg("dtype"))
      .def(
          "all_gather",
          [](const CommPtr& c, py::handle send, py::handle recv, bool async, OptMs timeoutMs,
             tccl::Algorithm algo, OptDt dt) {
            std::vector<BufferPtr> b;
            b.push_back(take(send, false, "input", dt, *c));
            b.push_back(take(recv, true, "output", dt, *c));
            sameType(*b[0], *b[1], *c);
            checkCount(cs::Collective::AllGather, b[1]->count(),
                       wantOut(cs::Collective::AllGather, b[0]->count(), *c),
                       "output (world size x input)", *c);
            const void* s = b[0]->data();
            void* r = b[1]->data();
            const size_t n = b[0]->count();
            const auto t = b[0]->dtype();
            const auto o = callOptions(timeoutMs, algo);
            return execute(c, std::move(b), async, [&](tccl::Communicator& k, bool a) {
              if (a) return k.allGatherAsync(s, r, n, t, o);
              k.allGather(s, r, n, t, o);
              return tccl::WorkPtr();
            });
          },
          py::arg("send"), py::arg("recv"), py::arg("async_op"), py::arg("timeout_ms"),
          py::arg("algorithm"), py::arg("dtype"))
      .def(
          "broadcast",
          [](const CommPtr& c, py::handle buf, int root, bool async, OptMs timeoutMs,
             tccl::Algorithm algo, OptDt dt) {
            std::vector<BufferPtr> b;
            // The root only reads (its output is its input, in place); a read-only array
            // may be broadcast from.
            b.push_back(take(buf, !cs::hasInput(cs::Collective::Broadcast, c->rank(), root),
                             "tensor", dt, *c));
            void* p = b[0]->data();
            const size_t n = b[0]->count();
            const auto t = b[0]->dtype();
            const auto o = callOptions(timeoutMs, algo);
            return execute(c, std::move(b), async, [&](tccl::Communicator& k, bool a) {
              if (a) return k.broadcastAsync(p, p, n, t, root, o);
              k.broadcast(p, p, n, t, root, o);
              return tccl::WorkPtr();
            });
          },
          py::arg("buf"), py::arg("root"), py::arg("async_op"), py::arg("timeout_ms"),
          py::arg("algorithm"), py::arg("dtype"))
      .def(
          "reduce",
          [](const CommPtr& c, py::handle buf, int root, tccl::ReduceOp op, bool async,
             OptMs timeoutMs, tccl::Algorithm algo, OptDt dt) {
            std::vector<BufferPtr> b;
            b.push_back(take(buf, cs::hasOutput(cs::Collective::Reduce, c->rank(), root), "tensor",
                             dt, *c));
            void* p = b[0]->data();
            const size_t n = b[0]->count();
            const auto t = b[0]->dtype();
            const auto o = callOptions(timeoutMs, algo);
            return execute(c, std::move(b), async, [&](tccl::Communicator& k, bool a) {
              if (a) return k.reduceAsync(p, p, n, t, op, root, o);
              k.reduce(p, p, n, t, op, root, o);
              return tccl::WorkPtr();
            });
          },
          py::arg("buf"), py::arg("root"), py::arg("op"), py::arg("async_op"),
          py::arg("timeout_ms"), py::arg("algorithm"), py::arg("dtype"))
      .def(
          "barrier",
          [](const CommPtr& c, bool async, OptMs timeoutMs) {
            const auto o = callOptions(timeoutMs, tccl::Algorithm::Auto);
            return execute(c, {}, async, [&](tccl::Communicator& k, bool a) {
              if (a) return k.barrierAsync(o);
              k.barrier(o);
              return tccl::WorkPtr();
            });
          },
          py::arg("async_op"), py::arg("timeout_ms"))
      .def(
          "all_to_all",
          [](const CommPtr& c, py::handle send, py::handle recv, bool async, OptMs timeoutMs,
             OptDt dt) {
            std::vector<BufferPtr> b;
            b.push_back(take(send, false, "input", dt, *c));
            b.push_back(take(recv, true, "output", dt, *c));
            sameType(*b[0], *b[1], *c);
            constexpr auto kA2A = cs::Collective::AllToAll;
            const size_t n = countOf(kA2A, cs::spec(kA2A).input, b[0]->count(), "input", *c);
            checkCount(kA2A, b[1]->count(), wantOut(kA2A, n, *c), "output", *c);
            const void* s = b[0]->data();
            void* r = b[1]->data();
            const auto t = b[0]->dtype();
            checkPlacement(kA2A, s, r, n, t, *c);
            const auto o = callOptions(timeoutMs, tccl::Algorithm::Auto);
            return execute(c, std::move(b), async, [&](tccl::Communicator& k, bool a) {
              if (a) return k.allToAllAsync(s, r, n, t, o);
              k.allToAll(s, r, n, t, o);
              return tccl::WorkPtr();
            });
          },
          py::arg("send"), py::arg("recv"), py::arg("async_op"), py::arg("timeout_ms"),
          py::arg("dtype"))
      // recv: root's N x count output (None elsewhere).
      .def(
          "gather",
          [](const CommPtr& c, py::handle send, py::handle recv, int root, bool async,
             OptMs timeoutMs, OptDt dt) {
            std::vector<BufferPtr> b;
            b.push_back(take(send, false, "input", dt, *c));
            void* r = nullptr;
            if (cs::hasOutput(cs::Collective::Gather, c->rank(), root)) {
              if (recv.is_none())
                invalid(named(cs::Collective::Gather, "the root needs an output"), c->rank());
              b.push_back(take(recv, true, "output", dt, *c));
              sameType(*b[0], *b[1], *c);
              checkCount(cs::Collective::Gather, b[1]->count(),
                         wantOut(cs::Collective::Gather, b[0]->count(), *c, root),
                         "output (world size x input)", *c);
              r = b[1]->data();
            }
            const void* s = b[0]->data();
            const size_t n = b[0]->count();
            const auto t = b[0]->dtype();
            const auto o = callOptions(timeoutMs, tccl::Algorithm::Auto);
            return execute(c, std::move(b), async, [&](tccl::Communicator& k, bool a) {
              if (a) return k.gatherAsync(s, r, n, t, root, o);
              k.gather(s, r, n, t, root, o);
              return tccl::WorkPtr();
            });
          },
          py::arg("send"), py::arg("recv"), py::arg("root"), py::arg("async_op"),
          py::arg("timeout_ms"), py::arg("dtype"))
      // send: root's N x count input (None elsewhere).
      .def(
          "scatter",
          [](const CommPtr& c, py::handle send, py::handle recv, int root, bool async,
             OptMs timeoutMs, OptDt dt) {
            std::vector<BufferPtr> b;
            b.push_back(take(recv, true, "output", dt, *c));
            const void* s = nullptr;
            if (cs::hasInput(cs::Collective::Scatter, c->rank(), root)) {
              if (send.is_none())
                invalid(named(cs::Collective::Scatter, "the root needs an input"), c->rank());
              b.push_back(take(send, false, "input", dt, *c));
              sameType(*b[0], *b[1], *c);
              checkCount(cs::Collective::Scatter, b[1]->count(),
                         wantIn(cs::Collective::Scatter, b[0]->count(), *c, root),
                         "input (world size x output)", *c);
              s = b[1]->data();
            }
            void* r = b[0]->data();
            const size_t n = b[0]->count();
            const auto t = b[0]->dtype();
            const auto o = callOptions(timeoutMs, tccl::Algorithm::Auto);
            return execute(c, std::move(b), async, [&](tccl::Communicator& k, bool a) {
              if (a) return k.scatterAsync(s, r, n, t, root, o);
              k.scatter(s, r, n, t, root, o);
              return tccl::WorkPtr();
            });
          },
          py::arg("send"), py::arg("recv"), py::arg("root"), py::arg("async_op"),
          py::arg("timeout_ms"), py::arg("dtype"))
      // The uneven collectives (docs/python.md, "Uneven collectives"), one entry point:
      // `kind` a row name ("alltoallv", ...); the counts lists as the C++ calls take them
      // (empty displacements: packed); send / recv None where the row has no buffer.
      .def("uneven", unevenCall, py::arg("kind"), py::arg("send"), py::arg("recv"),
           py::arg("count"), py::arg("send_counts"), py::arg("send_displs"), py::arg("recv_counts"),
           py::arg("recv_displs"), py::arg("root"), py::arg("op"), py::arg("async_op"),
           py::arg("timeout_ms"), py::arg("dtype"))
      // Point to point (docs/python.md): tag >= 0; a receive's peer may be -1 (any
      // source) and its tag -1 (any tag). A blocking receive returns (source, tag, count),
      // (-1, -1, 0) inside a group, where it is only recorded until group_end.
      .def(
          "send",
          [](const CommPtr& c, py::handle buf, int peer, int tag, bool async, OptMs timeoutMs,
             OptDt dt) {
            std::vector<BufferPtr> b;
            b.push_back(take(buf, false, "tensor", dt, *c));
            const void* p = b[0]->data();
            const size_t n = b[0]->count();
            const auto t = b[0]->dtype();
            const auto o = callOptions(timeoutMs, tccl::Algorithm::Auto);
            return execute(c, std::move(b), async, [&](tccl::Communicator& k, bool a) {
              if (a) return k.sendAsync(p, n, t, peer, tag, o);
              k.send(p, n, t, peer, tag, o);
              return tccl::WorkPtr();
            });
          },
          py::arg("buf"), py::arg("peer"), py::arg("tag"), py::arg("async_op"),
          py::arg("timeout_ms"), py::arg("dtype"))
      .def(
          "recv",
          [](const CommPtr& c, py::handle buf, int peer, int tag, bool async, OptMs timeoutMs,
             OptDt dt) {
            std::vector<BufferPtr> b;
            b.push_back(take(buf, true, "tensor", dt, *c));
            void* p = b[0]->data();
            const size_t n = b[0]->count();
            const auto t = b[0]->dtype();
            const auto o = callOptions(timeoutMs, tccl::Algorithm::Auto);
            tccl::RecvStatus st;
            py::object work = execute(c, std::move(b), async, [&](tccl::Communicator& k, bool a) {
              if (a) return k.recvAsync(p, n, t, peer, tag, o);
              st = k.recv(p, n, t, peer, tag, o);
              return tccl::WorkPtr();
            });
            if (async) return work;
            return py::object(py::make_tuple(st.source, st.tag, st.count));
          },
          py::arg("buf"), py::arg("peer"), py::arg("tag"), py::arg("async_op"),
          py::arg("timeout_ms"), py::arg("dtype"))
      // groupStart / groupEnd: groupEnd posts the group and waits for its blocking calls.
      .def("group_start", &tccl::Communicator::groupStart, py::call_guard<py::gil_scoped_release>())
      .def("group_end", &tccl::Communicator::groupEnd, py::call_guard<py::gil_scoped_release>());
}

// ---- stores ---------------------------------------------------------------------------

tccl::Bytes toBytes(py::handle v) {
  if (py::isinstance<py::str>(v)) {
    std::string s = v.cast<std::string>();
    return tccl::Bytes(s.begin(), s.end());
  }
  if (py::isinstance<py::bytes>(v) || py::isinstance<py::bytearray>(v) ||
      py::isinstance<py::memoryview>(v)) {
    std::string s = py::bytes(py::reinterpret_borrow<py::object>(v));
    return tccl::Bytes(s.begin(), s.end());
  }
  throw py::type_error("tccl: store values are bytes or str");
}

void bindStores(py::module_& m) {
  using tccl::Store;
  using StorePtr = std::shared_ptr<Store>;
  py::class_<Store, StorePtr>(m, "Store")
      .def("set",
           [](Store& s, const std::string& key, py::handle value) {
             auto v = toBytes(value);
             py::gil_scoped_release nogil;
             s.set(key, v);
           })
      .def("get",
           [](Store& s, const std::string& key) {
             tccl::Bytes v;
             {
               py::gil_scoped_release nogil;
               v = s.get(key);
             }
             return py::bytes(reinterpret_cast<const char*>(v.data()), v.size());
           })
      .def("add", &Store::add, py::arg("key"), py::arg("delta"),
           py::call_guard<py::gil_scoped_release>())
      .def("check", &Store::check, py::call_guard<py::gil_scoped_release>())
      .def(
          "wait",
          [](Store& s, const std::vector<std::string>& keys, OptMs timeoutMs) {
            py::gil_scoped_release nogil;
            s.wait(keys, timeoutMs ? Millis(*timeoutMs) : s.timeout());
          },
          py::arg("keys"), py::arg("timeout_ms") = py::none())
      .def("erase", &Store::erase, py::call_guard<py::gil_scoped_release>())
      .def_property(
          "timeout_ms", [](const Store& s) { return s.timeout().count(); },
          [](Store& s, int64_t ms) { s.setTimeout(Millis(ms)); });

  py::class_<tccl::HashStore, Store, std::shared_ptr<tccl::HashStore>>(m, "HashStore")
      .def(py::init<>());
  py::class_<tccl::FileStore, Store, std::shared_ptr<tccl::FileStore>>(m, "FileStore")
      .def(py::init<std::string>(), py::arg("path"))
      .def_property_readonly("path", &tccl::FileStore::path);
  py::class_<tccl::PrefixStore, Store, std::shared_ptr<tccl::PrefixStore>>(m, "PrefixStore")
      .def(py::init<std::string, StorePtr>(), py::arg("prefix"), py::arg("base"));
  py::class_<tccl::TcpStore, Store, std::shared_ptr<tccl::TcpStore>>(m, "TcpStore")
      .def(py::init([](const std::string& host, uint16_t port, OptMs connectTimeoutMs) {
             py::gil_scoped_release nogil;
             return std::make_shared<tccl::TcpStore>(host, port,
                                                     Millis(connectTimeoutMs.value_or(60000)));
           }),
           py::arg("host"), py::arg("port"), py::arg("connect_timeout_ms") = py::none())
      .def_property_readonly("host", &tccl::TcpStore::host)
      .def_property_readonly("port", &tccl::TcpStore::port)
      .def_property_readonly("local_address", &tccl::TcpStore::localAddress);
  py::class_<tccl::TcpStoreServer, std::shared_ptr<tccl::TcpStoreServer>>(m, "TcpStoreServer")
      .def(py::init<std::string, uint16_t>(), py::arg("host") = "127.0.0.1", py::arg("port") = 0)
      .def_property_readonly("host", &tccl::TcpStoreServer::host)
      .def_property_readonly("port", &tccl::TcpStoreServer::port)
      .def("stop", &tccl::TcpStoreServer::stop, py::call_guard<py::gil_scoped_release>());
}

}  // namespace

PYBIND11_MODULE(_tccl, m) {
  m.doc() = "tccl's communicator, stores and errors (use the tccl package, not this module)";

  py::enum_<tccl::DataType>(m, "DataType")
      .value("FLOAT32", tccl::DataType::Float32)
      .value("FLOAT64", tccl::DataType::Float64)
      .value("INT32", tccl::DataType::Int32)
      .value("INT64", tccl::DataType::Int64)
      .value("FLOAT16", tccl::DataType::Float16)
      .value("BFLOAT16", tccl::DataType::BFloat16)
      .value("INT8", tccl::DataType::Int8)
      .value("UINT8", tccl::DataType::UInt8);
  py::enum_<tccl::ReduceOp>(m, "ReduceOp")
      .value("SUM", tccl::ReduceOp::Sum)
      .value("PRODUCT", tccl::ReduceOp::Prod)
      .value("MIN", tccl::ReduceOp::Min)
      .value("MAX", tccl::ReduceOp::Max)
      .value("AVG", tccl::ReduceOp::Avg)
      // Integer dtypes only (a floating one is an InvalidArgumentError), as MPI_BAND etc.
      .value("BAND", tccl::ReduceOp::BAnd)
      .value("BOR", tccl::ReduceOp::BOr)
      .value("BXOR", tccl::ReduceOp::BXor);
  py::enum_<tccl::Algorithm>(m, "Algorithm")
      .value("AUTO", tccl::Algorithm::Auto)
      .value("RING", tccl::Algorithm::Ring)
      .value("NAIVE", tccl::Algorithm::Naive)
      .value("TREE", tccl::Algorithm::Tree)
      .value("HALVING_DOUBLING", tccl::Algorithm::HalvingDoubling)
      .value("RECURSIVE_DOUBLING", tccl::Algorithm::RecursiveDoubling)
      .value("HIERARCHICAL", tccl::Algorithm::Hierarchical);
  m.def("parse_algorithm", [](const std::string& s) -> tccl::Algorithm {
    if (auto a = tccl::parseAlgorithm(s)) return *a;
    invalid("unknown algorithm '" + s + "'");
  });

  // Called once by tccl/__init__.py: {kind name: class}.
  m.def("_set_error_classes", [](const py::dict& classes) {
    for (size_t k = 0; k < kNumKinds; ++k) {
      const std::string name(tccl::toString(static_cast<tccl::ErrorKind>(k)));
      if (!classes.contains(name)) throw py::key_error("no class for " + name);
      py::object cls = classes[py::str(name)];
      gErrorClasses[k] = cls.release().ptr();
    }
  });
  m.def("_error_kinds", [] {
    std::vector<std::string> names;
    for (size_t k = 0; k < kNumKinds; ++k)
      names.emplace_back(tccl::toString(static_cast<tccl::ErrorKind>(k)));
    return names;
  });
  // For tests: throws the error a C++ caller would see, with every field set.
  m.def("_raise_error", [](const std::string& kind) {
    tccl::ErrorInfo i;
    bool found = false;
    for (size_t k = 0; k < kNumKinds; ++k) {
      if (tccl::toString(static_cast<tccl::ErrorKind>(k)) == kind) {
        i.kind = static_cast<tccl::ErrorKind>(k);
        found = true;
      }
    }
    if (!found) throw py::value_error("unknown kind " + kind);
    i.message = "synthetic";
    i.rank = 1;
    i.peer = 2;
    i.peerAddress = "127.0.0.1:1234";
    i.collective = "allreduce";
    i.seq = 7;
    i.algorithm = "ring";
    i.phase = "reduce-scatter";
    i.step = 3;
    i.steps = 7;
    i.bytesMoved = 100;
    i.bytesExpected = 200;
    i.elapsedMs = 50;
    i.timeoutMs = 40;
    i.culprit = 2;
    i.culpritAddress = "127.0.0.1:1234";
    i.detectedBy = 1;
    i.localSignature = "allreduce #7 f32 x4 sum";
    i.remoteSignature = "broadcast #7 f32 x4 root 0";
    tccl::throwError(std::move(i));
  });
  py::register_exception_translator(&translateError);

  bindStores(m);
  bindCommunicator(m);

  py::class_<PyWork>(m, "_Work")
      .def("wait", &PyWork::wait, py::arg("timeout_ms") = py::none())
      .def("is_completed", &PyWork::isCompleted)
      .def("is_success", &PyWork::isSuccess)
      .def_property_readonly("stats", &PyWork::stats)
      .def_property_readonly("seq", &PyWork::seq)
      .def_property_readonly("source", &PyWork::source)
      .def_property_readonly("tag", &PyWork::tag);
}

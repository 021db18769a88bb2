// The storage table (torch/model.hpp): a model's storages as their bytes and sizes, whose
// Storage objects are made only when a Tensor is. Whole files read through it in every
// other test; these cases pin down what each kind of entry keeps alive.
#include <catch2/catch.hpp>

#include "support/helpers.hpp"

#include <memory>
#include <vector>

namespace {

std::shared_ptr<const ptread::Storage> owned_storage(size_t n, std::weak_ptr<const void>* owner_seen) {
  auto owner = std::make_shared<std::vector<uint8_t>>(n, uint8_t{7});
  *owner_seen = owner;
  const uint8_t* p = owner->data();
  return std::make_shared<const ptread::Storage>(p, n, std::move(owner));
}

}  // namespace

TEST_CASE("storage table: entries before and after their Storage objects are made", "[tensor]") {
  using ptread::detail::StorageTable;
  auto source = std::make_shared<std::vector<uint8_t>>(512);
  const uint8_t* base = source->data();
  std::weak_ptr<const void> source_seen = source;
  std::weak_ptr<const void> owner_seen;
  std::shared_ptr<const ptread::Storage> view, slice_of_owned;
  {
    ptread::detail::BlockPool pool;
    StorageTable t(&pool);
    t.set_source(source);
    source.reset();  // the table keeps the source

    const uint32_t a = t.add_view(base, 64);
    const uint32_t placeholder = t.add_view(nullptr, 32);
    auto mine = owned_storage(48, &owner_seen);
    const ptread::Storage* mine_ptr = mine.get();
    const uint32_t owned = t.add(std::move(mine));
    const uint32_t slice = t.add_view(nullptr, 0);
    const uint32_t owned_slice = t.add_view(nullptr, 0);
    REQUIRE(t.size() == 5);
    CHECK(t.data(a) == base);
    CHECK(t.nbytes(a) == 64);
    CHECK(t.data(placeholder) == nullptr);
    CHECK(t.nbytes(placeholder) == 32);
    CHECK(t.nbytes(owned) == 48);

    t.rebind(placeholder, base + 64, 40);  // its record, larger than first declared
    CHECK(t.data(placeholder) == base + 64);
    CHECK(t.nbytes(placeholder) == 40);
    t.set_slice(slice, a, 8, 16);  // a view's slice: a view of the source too
    CHECK(t.data(slice) == base + 8);
    CHECK(t.nbytes(slice) == 16);
    REQUIRE(reinterpret_cast<uintptr_t>(base) % 8 == 0);  // (from operator new)
    REQUIRE(reinterpret_cast<uintptr_t>(t.data(owned)) % 8 == 0);
    CHECK(t.aligned8());
    t.set_slice(owned_slice, owned, 4, 8);  // an owned storage's slice keeps that storage
    CHECK(t.data(owned_slice) == t.data(owned) + 4);
    CHECK_FALSE(t.aligned8());  // 4 bytes in

    // Made with the first call, once: the same object every time.
    view = t.shared(a);
    REQUIRE(view != nullptr);
    CHECK(view == t.shared(a));
    CHECK(view->data() == base);
    CHECK(view->nbytes() == 64);
    CHECK(t.shared(placeholder)->data() == base + 64);
    CHECK(t.shared(placeholder)->nbytes() == 40);
    CHECK(t.shared(owned).get() == mine_ptr);
    CHECK(t.shared(slice)->data() == base + 8);
    slice_of_owned = t.shared(owned_slice);
    CHECK(slice_of_owned->data() == mine_ptr->data() + 4);
    CHECK(slice_of_owned->nbytes() == 8);

    // Added or rebound after they are made: made at once.
    const uint32_t late = t.add_view(base + 128, 8);
    CHECK(t.shared(late)->data() == base + 128);
    t.rebind(late, base + 136, 16);
    CHECK(t.shared(late)->data() == base + 136);
    CHECK(t.shared(late)->nbytes() == 16);
  }
  // The table is gone: what was handed out keeps its bytes.
  CHECK_FALSE(source_seen.expired());
  CHECK_FALSE(owner_seen.expired());
  CHECK(view->data() == base);
  view.reset();
  CHECK(source_seen.expired());
  CHECK(slice_of_owned->data()[0] == 7);
  slice_of_owned.reset();
  CHECK(owner_seen.expired());
}

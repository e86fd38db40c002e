/// Items grouped by a small, dense number (their group's slot) with a counting sort: the
/// groups in slot order, each group's items in the order given. One pass to count, one to
/// place — for many items spread over many groups, where appending each item to its own
/// group's list as it comes would touch another list (and miss the cache) for nearly every
/// item.
public struct Grouping {
    /// The items' indices, group after group.
    public let members: [Int]
    /// Where each slot's group starts in ``members``; one more entry than there are slots,
    /// so that slot `s` is `members[starts[s]..<starts[s + 1]]`.
    public let starts: [Int]

    /// Groups the indices of `slots` by their values, which lie in `0..<slotCount`.
    public init(slots: [Int32], slotCount: Int) {
        var starts = [Int](repeating: 0, count: slotCount + 1)
        for slot in slots { starts[Int(slot) + 1] += 1 }
        for slot in 0..<slotCount { starts[slot + 1] += starts[slot] }
        var next = starts
        var members = [Int](repeating: 0, count: slots.count)
        for (index, slot) in slots.enumerated() {
            members[next[Int(slot)]] = index
            next[Int(slot)] += 1
        }
        self.members = members
        self.starts = starts
    }

    /// The members of slot `slot`'s group.
    public func group(_ slot: Int) -> ArraySlice<Int> { members[starts[slot]..<starts[slot + 1]] }
}

/// Dense numbers for keys, `0, 1, 2, …` in the order the keys are first seen: the slots a
/// ``Grouping`` groups by, when the items come with keys of any kind.
public struct DenseNumbering<Key: Hashable> {
    /// The keys numbered so far; a key's number is its index here.
    public private(set) var keys: [Key] = []
    private var numbers: [Key: Int32] = [:]

    public init() {}

    /// The key's number, the next one free if the key is new.
    public mutating func number(of key: Key) -> Int32 {
        if let known = numbers[key] { return known }
        let number = Int32(keys.count)
        numbers[key] = number
        keys.append(key)
        return number
    }

    /// The key's number, if it has one.
    public func existingNumber(of key: Key) -> Int32? { numbers[key] }
}

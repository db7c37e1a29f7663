-- The Slurm recipe (contrib/slurm) without a cluster: submit.sh checks its arguments before it
-- creates or submits anything (a stand-in sbatch records every call), and a task (shard.sbatch)
-- names its GPU by UUID (from CUDA_VISIBLE_DEVICES, or from a stand-in nvidia-smi) so that two
-- tasks can never open one GPU. The library's side: devices by UUID (`GPU-…`) in `open`,
-- `open_devices`, `devices()`, `caps()`, `describe()` and the command line's --device.
-- tests/slurm/live.sh runs the recipe on a live single-node Slurm.
local diversity = require "diversity"
local H = require "helpers"

describe("slurm recipe", function()
  local dir, bin

  setup(function()
    dir = H.tmpdir()
    bin = dir .. "/bin"
    os.execute("mkdir " .. H.q(bin))
    -- sbatch: records its arguments, answers a job id.
    H.write(bin .. "/sbatch", '#!/bin/sh\necho "sbatch $*" >> "$SBATCH_LOG"\necho 42\n')
    -- the task's command: prints the device it was given.
    H.write(bin .. "/cli", '#!/bin/sh\necho "device=${DIVERSITY_DEVICE:-}"\n')
    os.execute("chmod +x " .. H.q(bin) .. "/*")
  end)

  teardown(function() H.cleanup() end)

  -- submit.sh with `args` (a string of shell words), sbatch on PATH recording to a log.
  local function submit(args)
    local log = dir .. "/sbatch.log"
    os.remove(log)
    local rc, out, err = H.sh(("SBATCH_LOG=%s PATH=%s:$PATH bash contrib/slurm/submit.sh %s")
      :format(H.q(log), H.q(bin), args))
    return rc, out, err, H.exists(log) and H.read(log) or ""
  end

  it("submit.sh refuses bad arguments before creating or submitting anything", function()
    local out = dir .. "/out"
    local o = "--outdir " .. H.q(out) .. " "
    local cases = {
      { "--shards 2147483649 " .. o .. "-- --table t", "--shards '2147483649': expected a whole number of tasks from 1 to 4000000" },
      { "--shards 99999999999999999999999 " .. o, "--shards '99999999999999999999999': expected a whole number" },
      { "--shards 4000001 " .. o, "--shards '4000001'" },
      { "--shards 0 " .. o, "--shards '0'" },
      { "--shards -3 " .. o, "--shards '-3'" },
      { "--shards 2x " .. o, "--shards '2x'" },
      { "--shards '' " .. o, "--shards needs a value" },
      { o .. "--shards", "--shards needs a value" },
      { "--shards 3 " .. o .. "--only , -- --table t", "--only ',': expected a comma-separated list of tasks from 1 to 3" },
      { "--shards 3 " .. o .. "--only 1,,2", "--only '1,,2': expected a comma-separated list" },
      { "--shards 3 " .. o .. "--only 2,", "--only '2,': expected a comma-separated list" },
      { "--shards 3 " .. o .. "--only ,2", "--only ',2': expected a comma-separated list" },
      { "--shards 3 " .. o .. "--only 1-3", "--only '1-3': expected a comma-separated list" },
      { "--shards 3 " .. o .. "--only ''", "--only needs a value" },
      { "--shards 3 " .. o .. "--only 4", "--only '4': task 4 is not one of 1..3" },
      { "--shards 3 " .. o .. "--only 0", "--only '0': task 0 is not one of 1..3" },
      { "--shards 3 " .. o .. "--only 99999999999999999999", "--only '99999999999999999999': task 99999999999999999999 is not one of 1..3" },
      { "--shards 3 " .. o .. "--only 2,3,2", "--only '2,3,2': task 2 is listed twice" },
      { "--shards 3 " .. o .. "-- --table t --out x.json", "ARGS: --out is set by each task itself" },
      { "--shards 3 " .. o .. "-- --table t --out=x.json", "ARGS: --out is set by each task itself" },
      { "--shards 3 " .. o .. "-- --table t --shard 1/3", "ARGS: --shard is set by each task itself" },
      { "--shards 3 " .. o .. "-- --table t --shard=1/3", "ARGS: --shard is set by each task itself" },
      { "--shards 3 " .. o .. "--kind rankings -- --table t --graph g.knn", "ARGS: --graph is set by each task itself" },
      { "--shards 3 " .. o .. "-- --embeddings e --resume", "ARGS: --resume is set by each task itself" },
      { "--shards 3 " .. o .. "-- --embeddings e --device 0", "ARGS: --device would put every task on the same device" },
      { "--shards 3 " .. o .. "-- --embeddings e --devices=0,1", "ARGS: --devices would put every task on the same device" },
      { "--shards 3 " .. o .. "--kind both", "--kind both: expected cache or rankings" },
    }
    for _, c in ipairs(cases) do
      local rc, _, err, log = submit(c[1])
      assert.are.equal(2, rc, c[1] .. ": " .. err)
      assert.truthy(err:find("submit.sh: " .. c[2], 1, true), c[1] .. ": " .. err)
      assert.are.equal("", log, c[1] .. ": submitted")
      assert.is_false(H.exists(out), c[1] .. ": created " .. out)
    end
    -- The good case submits the array (only the tasks asked for) and the merge.
    local rc, stdout, err, log = submit("--shards 3 " .. o .. "--only 3,1 -- --embeddings e --top-k 4")
    assert.are.equal(0, rc, err)
    assert.are.equal("array 42\nmerge 42\n", stdout)
    assert.truthy(log:find("--array=3,1 ", 1, true), log)
    assert.truthy(log:find("shard.sbatch --embeddings e --top-k 4\n", 1, true), log)
    assert.truthy(log:find("--dependency=afterok:42", 1, true), log)
  end)

  -- shard.sbatch run as task 1 of 2 with `env` (shell words), the stand-in nvidia-smi printing
  -- `smi` (nil: none on PATH; false: one that fails); returns the device the task was given and
  -- its log line.
  local function task(env, smi)
    local smidir = dir .. "/smi"
    os.execute("rm -rf " .. H.q(smidir) .. "; mkdir " .. H.q(smidir))
    if smi ~= nil then
      H.write(smidir .. "/nvidia-smi", smi and ("#!/bin/sh\nprintf '%s'\n"):format(smi)
        or "#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2; exit 9\n")
      os.execute("chmod +x " .. H.q(smidir) .. "/nvidia-smi")
    end
    local rc, out, err = H.sh(("env -u DIVERSITY_DEVICE -u CUDA_VISIBLE_DEVICES PATH=%s:%s:/usr/bin:/bin "
      .. "SLURM_ARRAY_TASK_ID=1 DIVERSITY_SHARDS=2 DIVERSITY_OUTDIR=%s DIVERSITY_CLI=%s %s "
      .. "bash contrib/slurm/shard.sbatch"):format(H.q(smidir), H.q(bin), H.q(dir), H.q(bin .. "/cli"),
      env))
    assert.are.equal(0, rc, err)
    return out:match("^device=(.-)\n"), err
  end

  it("a task names its GPU by UUID when it can, and says so when it cannot", function()
    local A = "GPU-aaaa1111-2222-3333-4444-555555555555"
    local B = "GPU-bbbb1111-2222-3333-4444-555555555555"
    local two = ("0, %s\\n1, %s\\n"):format(A, B)
    -- A UUID in CUDA_VISIBLE_DEVICES is passed on (the first one).
    local dev, log = task("CUDA_VISIBLE_DEVICES=" .. B .. "," .. A, two)
    assert.are.equal(B, dev)
    assert.truthy(log:find("the UUID in CUDA_VISIBLE_DEVICES", 1, true), log)
    -- An index: nvidia-smi's GPU with that index.
    dev, log = task("CUDA_VISIBLE_DEVICES=1,0", two)
    assert.are.equal(B, dev)
    assert.truthy(log:find("device " .. B .. " (CUDA_VISIBLE_DEVICES=1,0, the GPU's UUID from nvidia-smi)", 1, true), log)
    dev = task("CUDA_VISIBLE_DEVICES=0", two)
    assert.are.equal(A, dev)
    -- Device cgroups: nvidia-smi lists the task's one GPU, whatever index Slurm gave.
    dev = task("CUDA_VISIBLE_DEVICES=3", "0, " .. B .. "\\n")
    assert.are.equal(B, dev)
    -- No nvidia-smi, a failing one, one that lists no such GPU: the index, unverified, said.
    for _, smi in ipairs({ "none", false, two }) do
      dev, log = task("CUDA_VISIBLE_DEVICES=5", smi ~= "none" and smi or nil)
      assert.are.equal("5", dev)
      assert.truthy(log:find("device 5 (CUDA_VISIBLE_DEVICES=5 taken as a Vulkan device index, not verified by UUID", 1, true), log)
    end
    -- DIVERSITY_DEVICE wins; without any GPU granted, the library's best device.
    dev, log = task("DIVERSITY_DEVICE=llvmpipe CUDA_VISIBLE_DEVICES=1", two)
    assert.are.equal("llvmpipe", dev)
    assert.truthy(log:find("(from DIVERSITY_DEVICE)", 1, true), log)
    dev, log = task("", two)
    assert.are.equal("", dev)
    assert.truthy(log:find("device (best)", 1, true), log)
  end)

  it("devices are selected by UUID, and a UUID no device has is refused by name", function()
    local list = diversity.devices()
    assert.truthy(#list >= 1)
    for _, d in ipairs(list) do
      assert.truthy(d.uuid:match("^GPU%-%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x+$"), d.uuid)
    end
    local want = list[1]
    for _, sel in ipairs({ want.uuid, want.uuid:upper(), want.uuid:sub(1, 16) }) do
      local ctx = diversity.open { device = sel }
      assert.are.equal(want.uuid, ctx:caps().uuid, sel)
      assert.truthy(ctx:describe():find("uuid:%s+" .. want.uuid:gsub("%-", "%%-")), ctx:describe())
      ctx:close()
    end
    local ctxs = diversity.open_devices(want.uuid .. ",0")
    assert.are.equal(2, #ctxs)
    for _, c in ipairs(ctxs) do assert.are.equal(want.uuid, c:caps().uuid); c:close() end
    -- No device, not a UUID, a MIG instance: refused, naming the selector and the devices.
    local absent = "GPU-00000000-dead-beef-0000-000000000000"
    local m = H.error_of(diversity.open, { device = absent })
    assert.truthy(m:find("no device has the UUID '" .. absent .. "'", 1, true), m)
    assert.truthy(m:find(want.uuid, 1, true), m)
    m = H.error_of(diversity.open, { device = "GPU-xyz" })
    assert.truthy(m:find("'GPU-xyz' is not a GPU UUID", 1, true), m)
    m = H.error_of(diversity.open, { device = "MIG-" .. want.uuid:sub(5) })
    assert.truthy(m:find("MIG instance", 1, true), m)
    m = H.error_of(diversity.open_devices, "0," .. absent)
    assert.truthy(m:find("device list '0," .. absent .. "'", 1, true), m)
    assert.truthy(m:find("no device has the UUID", 1, true), m)
    -- The command line: refused before anything is written, an existing output untouched.
    local out = dir .. "/cache.json"
    H.write(out, "old bytes")
    local before = H.snapshot(dir)
    local rc, _, err = H.cli({ "--embeddings", H.DATA_JSON, "--top-k", "2", "--starts", "0",
      "--quiet", "--device", absent, "--out", out })
    assert.are.equal(1, rc, err)
    assert.truthy(err:find("no device has the UUID '" .. absent .. "'", 1, true), err)
    assert.are.equal("old bytes", H.read(out))
    assert.are.same(before, H.snapshot(dir))
  end)
end)

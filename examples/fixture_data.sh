# Sourced by the example tests: fixture_data FIXTURE_DIR DATA_DIR copies the committed
# 16-example Fashion-MNIST fixture into DATA_DIR as both splits (train and t10k), under the
# file names the training programs read.
fixture_data() {
  local fixture=$1 data=$2 split
  mkdir -p "$data"
  for split in train t10k; do
    cp "$fixture/fmnist-16-images-idx3-ubyte.gz" "$data/$split-images-idx3-ubyte.gz"
    cp "$fixture/fmnist-16-labels-idx1-ubyte.gz" "$data/$split-labels-idx1-ubyte.gz"
  done
}

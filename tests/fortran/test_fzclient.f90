! test_fzclient.f90 - the fzclient module's calls beyond the example, against
! the fzd at $FZD_SOCKET: a real(8) 3-D array with a pointwise relative
! bound (Fortran's column-major extents reach fzd slowest first, so the
! archive's header must name them reversed), the exact lossless mode, a
! decompression into an array of the wrong size (FZ_ESIZE), an archive
! buffer too small (FZ_ENOSPC, with the daemon's message), and a refused
! connection (FZ_ECONNREFUSED with its reason).  Exits 1 at the first
! failed check.
program test_fzclient
  use, intrinsic :: iso_c_binding
  use fzclient
  implicit none
  integer, parameter :: nx = 40, ny = 30, nz = 20
  real(c_double), allocatable :: a(:, :, :), b(:, :, :), small(:)
  integer(c_int8_t), allocatable :: arc(:), tiny(:)
  integer(c_size_t) :: bound, n
  real(c_double) :: eb_abs
  type(c_ptr) :: c, none
  character(len=256) :: msg
  integer :: st, i, j, k

  allocate(a(nx, ny, nz), b(nx, ny, nz), small(10), tiny(8))
  do k = 1, nz
    do j = 1, ny
      do i = 1, nx
        a(i, j, k) = 1.0d0 + sin(0.1d0 * i) * cos(0.2d0 * j) + 0.01d0 * k
      end do
    end do
  end do
  call check(fz_client_connect_f(c, '', msg) == 0, 'connect: ' // msg)

  call check(fz_compress_bound_f('f64', shape(a), '', 1.0d-4, 'pwrel', bound) == 0, 'bound')
  allocate(arc(bound))
  st = fz_compress_f64(c, a, shape(a), '', 1.0d-4, 'pwrel', arc, n, eb_abs)
  call check(st == 0, 'compress f64 pwrel')
  st = fz_decompress_f64(c, arc, n, b, size(b))
  call check(st == 0, 'decompress f64')
  call check(all(abs(a - b) <= 1.0d-4 * abs(a)), 'pwrel bound kept')
  call check(any(a /= b), 'lossy: something changed')
  call check(header_dims_reversed(arc, n), 'the header names (nz, ny, nx)')

  st = fz_decompress_f64(c, arc, n, small, size(small))
  call check(st /= 0, 'decompress into 10 elements must fail')

  st = fz_compress_f64(c, a, shape(a), 'lossless', 0.0d0, '', arc, n, eb_abs)
  call check(st == 0, 'compress lossless')
  st = fz_decompress_f64(c, arc, n, b, size(b))
  call check(st == 0 .and. all(a == b), 'lossless round trip is exact')

  st = fz_compress_f64(c, a, shape(a), '', 1.0d-3, 'rel', tiny, n, eb_abs)
  call check(st == -28, 'an 8-byte archive buffer gives FZ_ENOSPC')
  call fz_client_errmsg_f(c, msg)
  call check(len_trim(msg) > 0, 'errmsg explains ENOSPC')
  call fz_client_close_f(c)
  call check(.not. c_associated(c), 'close clears the handle')

  st = fz_client_connect_f(none, 'unix:/nonexistent/fzd.sock', msg)
  call check(st == -111, 'connect to nothing gives FZ_ECONNREFUSED')
  call check(index(msg, '/nonexistent/fzd.sock') > 0, 'its message names the socket: ' // msg)
  call fz_strerror_f(st, msg)
  call check(trim(msg) == 'connection refused', 'fz_strerror_f: ' // msg)
  print '(a)', 'test_fzclient: all checks passed'
  deallocate(a, b, small, tiny, arc)

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      print '(2a)', 'test_fzclient: FAILED: ', trim(what)
      stop 1
    end if
  end subroutine

  ! The archive's dims (docs/format.md) read with fz_client_archive_info
  ! through the C helper of this test.
  logical function header_dims_reversed(arc, n)
    integer(c_int8_t), intent(in), target :: arc(:)
    integer(c_size_t), intent(in) :: n
    interface
      integer(c_int) function archive_dims(arc, len, dims) bind(C, name='test_archive_dims')
        import :: c_int, c_ptr, c_size_t, c_int64_t
        type(c_ptr), value :: arc
        integer(c_size_t), value :: len
        integer(c_int64_t), intent(out) :: dims(4)
      end function
    end interface
    integer(c_int64_t) :: d(4)
    header_dims_reversed = archive_dims(c_loc(arc), n, d) == 3 .and. d(1) == nz .and. &
                           d(2) == ny .and. d(3) == nx
  end function
end program test_fzclient
